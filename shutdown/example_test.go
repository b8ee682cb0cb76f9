package shutdown_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/gracekit/gracekit/shutdown"
)

// A provider's Notifier tells a gateway's Handler to evict it.
func ExampleHandler() {
	key := []byte("a shared secret, 16 bytes or more")

	// Gateway side: evict from the local view of the "orders" service.
	evict := shutdown.EvicterFunc(func(_ context.Context, inst shutdown.Instance) error {
		fmt.Printf("gateway: evict %s %s at %s:%d\n", inst.Service, inst.ID, inst.Address, inst.Port)
		return nil
	})
	h, err := shutdown.NewHandler(key, shutdown.EvicterMap(map[string]shutdown.Evicter{"orders": evict}))
	if err != nil {
		fmt.Println(err)
		return
	}
	gw := httptest.NewServer(h)
	defer gw.Close()

	// Provider side, during its stop.
	n, err := shutdown.NewNotifier(
		shutdown.Instance{Service: "orders", ID: "orders-1", Address: "10.0.0.7", Port: 8080},
		key,
		shutdown.StaticTargets(gw.URL+"/flush"),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	reports, err := n.Flush(context.Background())
	fmt.Println("provider: acked", reports[0].Acked, "after", reports[0].Attempts, "attempt(s), err", err)
	// Output:
	// gateway: evict orders orders-1 at 10.0.0.7:8080
	// provider: acked true after 1 attempt(s), err <nil>
}
