package flush_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/gracekit/gracekit/shutdown/flush"
)

// A provider's Notifier tells a gateway's Handler to evict it.
func ExampleHandler() {
	key := []byte("a shared secret, 16 bytes or more")

	// Gateway side: evict from the local view of the "orders" service. The
	// handler answers only requests meant for its own flush URL.
	evict := flush.EvicterFunc(func(_ context.Context, req flush.Request) (flush.Result, error) {
		fmt.Printf("gateway: evict %s %s at %s:%d, registration %d\n", req.Service, req.ID, req.Address, req.Port, req.Czxid)
		return flush.Evicted, nil
	})
	gw := httptest.NewUnstartedServer(nil)
	defer gw.Close()
	flushURL := "http://" + gw.Listener.Addr().String() + "/flush"
	h, err := flush.NewHandler(key, []string{flushURL}, flush.EvicterMap(map[string]flush.Evicter{"orders": evict}))
	if err != nil {
		fmt.Println(err)
		return
	}
	gw.Config.Handler = h
	gw.Start()

	// Provider side, during its stop, after deregistering the node whose
	// creation zxid Registration returns (sd.Registrar.Czxid).
	n, err := flush.NewNotifier(
		flush.Self{Service: "orders", ID: "orders-1", Address: "10.0.0.7", Port: 8080},
		key,
		flush.StaticTargets(flushURL),
		flush.Registration(func() int64 { return 4242 }),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	reports, err := n.Flush(context.Background())
	fmt.Println("provider: acked", reports[0].Acked, "result", reports[0].Result, "after", reports[0].Attempts, "attempt(s), err", err)
	// Output:
	// gateway: evict orders orders-1 at 10.0.0.7:8080, registration 4242
	// provider: acked true result evicted after 1 attempt(s), err <nil>
}
