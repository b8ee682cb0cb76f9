package testutil

import (
	"testing"

	kitsd "github.com/go-kit/kit/sd"
	kitzk "github.com/go-kit/kit/sd/zk"
	"github.com/go-kit/log"
	"github.com/go-zookeeper/zk"
)

// GoKitEvents is what a stock go-kit sd/zk Instancer of path publishes,
// through its own client to addrs; both stop when the test ends.
func GoKitEvents(tb testing.TB, addrs []string, path string) chan kitsd.Event {
	tb.Helper()
	client, err := kitzk.NewClient(addrs, log.NewNopLogger(), kitzk.EventHandler(func(zk.Event) {}))
	if err != nil {
		tb.Fatal(err)
	}
	in, err := kitzk.NewInstancer(client, path, log.NewNopLogger())
	if err != nil {
		client.Stop()
		tb.Fatal(err)
	}
	ch := make(chan kitsd.Event, 64)
	in.Register(ch)
	tb.Cleanup(func() {
		in.Deregister(ch)
		in.Stop()
		client.Stop()
	})
	return ch
}
