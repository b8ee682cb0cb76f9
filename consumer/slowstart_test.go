package consumer_test

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
)

// Against a real ZooKeeper: providers registered before the consumer's
// first load get their full share at once, although they registered
// within the window; one registered after it starts with a small share
// that grows to a full one. It asserts the order of the shares, not when
// they change.
func TestSlowStartRampsAProviderThatRegistersAfterTheFirstLoad(t *testing.T) {
	t.Parallel()
	zkc, base := sharedZK(t)
	cl, err := sd.NewClient(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	register := func(id string, port int) {
		t.Helper()
		r, err := sd.NewRegistrar(cl, sd.Instance{Name: "quote", ID: id, Address: "127.0.0.1", Port: port}, sd.BasePath(base))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.RegisterContext(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	register("a", 4001)
	register("b", 4002)

	sess, err := sd.NewSession(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	const window = 4 * time.Second
	c, err := consumer.New(sess, consumer.WithSlowStart(window, 1, 0.1), consumer.WithInstancerOptions(sd.BasePath(base)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop(ctx) }()
	factory := func(instance string) (kitendpoint.Endpoint, io.Closer, error) {
		return func(context.Context, any) (any, error) { return instance, nil }, nil, nil
	}
	call, err := c.Endpoint(ctx, "quote", factory)
	if err != nil {
		t.Fatal(err)
	}
	batch := func() map[string]int {
		got := map[string]int{}
		for range 600 {
			r, err := call(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			got[r.(string)]++
		}
		return got
	}
	if got := batch(); got["127.0.0.1:4001"] != 300 || got["127.0.0.1:4002"] != 300 {
		t.Fatalf("the first load's providers got %v of 600 calls, want 300 each at once", got)
	}

	register("c", 4003)
	e := c.Endpointers("quote")[0]
	testutil.WaitFor(t, "the consumer lists c", func() bool { return slices.Contains(e.Instances(), "127.0.0.1:4003") })
	var shares []int
	for {
		shares = append(shares, batch()["127.0.0.1:4003"])
		if shares[len(shares)-1] >= 195 || len(shares) > 200 {
			break // a full third (200 of 600)
		}
		time.Sleep(window / 8)
	}
	first, last := shares[0], shares[len(shares)-1]
	// At weight 0.1 to 0.3 c gets 29 to 78 of 600; with its full weight 200.
	if first >= 120 || last < 195 || !(first < last) {
		t.Fatalf("c's calls per 600 over the window: %v; want a small share first, growing to a third", shares)
	}
	t.Logf("c's calls per 600 over the window: %v", shares)
}

// Issue 40: a provider restarted on the same address under a new id,
// while its old node still lists that address, was never ramped: the
// Endpointer weighed only instance strings new to its set. The ramp is
// keyed by the registration, so the new one ramps. The window is ten
// minutes: the shares cannot move while the test counts.
func TestSlowStartRampsAProviderRestartedOnTheSameAddress(t *testing.T) {
	t.Parallel()
	zkc, base := sharedZK(t)
	cl, err := sd.NewClient(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	register := func(id string, port int) {
		t.Helper()
		r, err := sd.NewRegistrar(cl, sd.Instance{Name: "quote", ID: id, Address: "127.0.0.1", Port: port}, sd.BasePath(base))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.RegisterContext(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	register("a", 4001)
	register("b", 4002)

	sess, err := sd.NewSession(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(sess, consumer.WithSlowStart(10*time.Minute, 1, 0.1), consumer.WithInstancerOptions(sd.BasePath(base)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop(ctx) }()
	factory := func(instance string) (kitendpoint.Endpoint, io.Closer, error) {
		return func(context.Context, any) (any, error) { return instance, nil }, nil, nil
	}
	call, err := c.Endpoint(ctx, "quote", factory)
	if err != nil {
		t.Fatal(err)
	}
	batch := func() map[string]int {
		got := map[string]int{}
		for range 600 {
			r, err := call(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			got[r.(string)]++
		}
		return got
	}
	if got := batch(); got["127.0.0.1:4002"] != 300 {
		t.Fatalf("the first load's providers got %v of 600 calls, want 300 each", got)
	}

	// b restarts on its address as b2; b's node stays (its session has not
	// expired yet). Then c registers: once the Endpointer lists c, it has
	// applied a set with b2 in it.
	register("b2", 4002)
	register("c", 4003)
	e := c.Endpointers("quote")[0]
	testutil.WaitFor(t, "the consumer lists c", func() bool { return slices.Contains(e.Instances(), "127.0.0.1:4003") })
	// Weights a 1, b2 0.1, c 0.1: b2 gets 50 of 600; at its full weight 286.
	if got := batch(); got["127.0.0.1:4002"] >= 150 {
		t.Fatalf("the provider restarted on 127.0.0.1:4002 got %d of 600 calls at once (%v), want about 50: it was not ramped", got["127.0.0.1:4002"], got)
	}
}
