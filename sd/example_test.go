package sd_test

import (
	"context"
	"fmt"
	"os"

	kitsd "github.com/go-kit/kit/sd"

	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// A provider registers; a consumer discovers it, as go-kit events.
func Example() {
	dir, _ := os.MkdirTemp("", "sd-example-")
	defer os.RemoveAll(dir)
	zk, err := zktest.Start(dir) // a real ZooKeeper on a loopback port
	if err != nil {
		fmt.Println(err)
		return
	}
	defer zk.Close()

	client, err := sd.NewClient(zk.ConnectString())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	reg, _ := sd.NewRegistrar(client, sd.Instance{Name: "quote", ID: "quote-1", Address: "10.0.0.7", Port: 8080})
	if err := reg.RegisterContext(context.Background()); err != nil {
		fmt.Println(err)
		return
	}

	in, _ := sd.NewInstancer(client, "quote")
	defer in.Stop()
	events := make(chan kitsd.Event, 1)
	in.Register(events)
	defer in.Deregister(events)
	fmt.Println((<-events).Instances)

	_ = reg.SetStatus(context.Background(), sd.StatusOutOfService)
	fmt.Println((<-events).Instances)
	// Output:
	// [10.0.0.7:8080]
	// []
}
