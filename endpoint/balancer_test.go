package endpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitlb "github.com/go-kit/kit/sd/lb"
)

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.0.0.%d:8080", i+1)
	}
	return out
}

var balancerNames = []string{"round robin", "random", "p2c", "sticky"}

// balancers builds each of the package's balancers over e.
func balancers(t *testing.T, e *Endpointer) map[string]kitlb.Balancer {
	t.Helper()
	rr, err1 := NewRoundRobin(e)
	rnd, err2 := NewRandom(e)
	p2c, err3 := NewP2C(e)
	st, err4 := NewSticky(e)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		t.Fatal(err)
	}
	return map[string]kitlb.Balancer{"round robin": rr, "random": rnd, "p2c": p2c, "sticky": st}
}

func TestBalancerConstructorsRejectBadInput(t *testing.T) {
	e, _, _ := newTestEndpointer(t, []string{"a"})
	tests := []struct {
		name string
		give func() error
	}{
		{"round robin rejects a nil endpointer", func() error { _, err := NewRoundRobin(nil); return err }},
		{"random rejects a nil endpointer", func() error { _, err := NewRandom(nil); return err }},
		{"p2c rejects a nil endpointer", func() error { _, err := NewP2C(nil); return err }},
		{"sticky rejects a nil endpointer", func() error { _, err := NewSticky(nil); return err }},
		{"sticky rejects a nil key func", func() error { _, err := NewSticky(e, StickyKeyFunc(nil)); return err }},
		{"sticky rejects zero replicas", func() error { _, err := NewSticky(e, StickyReplicas(0)); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.give(); err == nil || !strings.HasPrefix(err.Error(), "endpoint: ") {
				t.Fatalf("got %v, want an error starting with \"endpoint: \"", err)
			}
		})
	}
}

func TestRoundRobinIsFairOverEveryFullCycle(t *testing.T) {
	tests := []struct {
		give int // instances
		want int // picks of each over the run
	}{
		{give: 1, want: 7},
		{give: 3, want: 7},
		{give: 10, want: 7},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d instances each get %d of %d picks", tt.give, tt.want, tt.give*tt.want), func(t *testing.T) {
			e, _, _ := newTestEndpointer(t, names(tt.give))
			rr, _ := NewRoundRobin(e)
			counts := map[string]int{}
			for range tt.give * tt.want {
				got, err := call(rr)
				if err != nil {
					t.Fatal(err)
				}
				counts[got]++
			}
			for _, n := range names(tt.give) {
				if counts[n] < tt.want-1 || counts[n] > tt.want+1 {
					t.Errorf("%s picked %d times, want %d±1", n, counts[n], tt.want)
				}
			}
		})
	}
}

func TestRoundRobinIsFairUnderConcurrentCallers(t *testing.T) {
	const (
		instances = 10
		workers   = 8
		perWorker = 250 // 2000 picks: 200 per instance
	)
	e, _, _ := newTestEndpointer(t, names(instances))
	rr, _ := NewRoundRobin(e)
	var (
		mu     sync.Mutex
		counts = map[string]int{}
		wg     sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			local := map[string]int{}
			for range perWorker {
				got, err := call(rr)
				if err != nil {
					t.Error(err)
					return
				}
				local[got]++
			}
			mu.Lock()
			for k, v := range local {
				counts[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	want := workers * perWorker / instances
	for _, n := range names(instances) {
		if counts[n] < want-1 || counts[n] > want+1 {
			t.Errorf("%s picked %d times, want %d±1", n, counts[n], want)
		}
	}
}

func TestRandomReachesEveryInstance(t *testing.T) {
	e, _, _ := newTestEndpointer(t, names(4))
	b, _ := NewRandom(e)
	seen := map[string]bool{}
	for i := 0; len(seen) < 4 && i < 10000; i++ {
		got, err := call(b)
		if err != nil {
			t.Fatal(err)
		}
		seen[got] = true
	}
	if len(seen) != 4 {
		t.Fatalf("random reached %d of 4 instances in 10000 picks", len(seen))
	}
}

func TestP2CPrefersTheIdleInstance(t *testing.T) {
	e, _, fl := newTestEndpointer(t, []string{"busy", "idle"})
	p2c, _ := NewP2C(e)
	busy := fl.get(t, "busy")
	entered, release := busy.holdCalls()
	defer release()

	// Put one call in flight on "busy" by calling it directly.
	eps, _ := e.Endpoints() // sorted: busy, idle
	done := make(chan error, 1)
	go func() { _, err := eps[0](context.Background(), nil); done <- err }()
	<-entered

	for range 200 {
		got, err := call(p2c)
		if err != nil {
			t.Fatal(err)
		}
		if got != "idle" {
			t.Fatalf("p2c picked %q with a call in flight on it, want idle", got)
		}
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestStickyKeepsKeysAcrossMembershipChanges(t *testing.T) {
	e, src, _ := newTestEndpointer(t, []string{"a", "b", "c"})
	st, _ := NewSticky(e)
	ep, err := st.Endpoint()
	if err != nil {
		t.Fatal(err)
	}
	place := func() map[string]string {
		m := map[string]string{}
		for i := range 1000 {
			key := fmt.Sprintf("user-%d", i)
			got, err := ep(WithStickyKey(context.Background(), key), nil)
			if err != nil {
				t.Fatal(err)
			}
			m[key] = got.(string)
		}
		return m
	}
	before := place()
	if again := place(); fmt.Sprint(again) != fmt.Sprint(before) {
		t.Fatal("the same keys were placed differently on an unchanged set")
	}
	perInstance := map[string]int{}
	for _, v := range before {
		perInstance[v]++
	}
	for _, n := range []string{"a", "b", "c"} {
		if perInstance[n] < 150 {
			t.Errorf("instance %s got %d of 1000 keys; the ring is badly skewed", n, perInstance[n])
		}
	}

	t.Run("a joining instance takes keys only for itself", func(t *testing.T) {
		src.Set("a", "b", "c", "d")
		settle(e)
		moved := 0
		for k, v := range place() {
			if v != before[k] {
				moved++
				if v != "d" {
					t.Errorf("key %s moved from %s to %s, not to the new instance", k, before[k], v)
				}
			}
		}
		if moved == 0 {
			t.Error("the new instance got no keys")
		}
	})
	t.Run("a leaving instance moves only its own keys", func(t *testing.T) {
		src.Set("a", "c")
		settle(e)
		for k, v := range place() {
			if before[k] != "b" && v != before[k] {
				t.Errorf("key %s moved from %s to %s though %s stayed", k, before[k], v, before[k])
			}
		}
	})
}

func TestStickyWithoutAKeyIsRoundRobin(t *testing.T) {
	e, _, _ := newTestEndpointer(t, []string{"a", "b"})
	st, _ := NewSticky(e)
	counts := map[string]int{}
	for range 10 {
		got, err := call(st)
		if err != nil {
			t.Fatal(err)
		}
		counts[got]++
	}
	if counts["a"] != 5 || counts["b"] != 5 {
		t.Fatalf("keyless picks = %v, want 5 each", counts)
	}
}

func TestBalancersSkipAClosingInstance(t *testing.T) {
	for _, name := range balancerNames {
		t.Run(name+" skips an instance that sent the closing signal", func(t *testing.T) {
			e, _, fl := newTestEndpointer(t, []string{"a", "b", "c"})
			b := balancers(t, e)[name]
			a := fl.get(t, "a")
			a.closing.Store(true)
			eps, _ := e.Endpoints()
			if got, err := eps[0](context.Background(), nil); err != nil || got != "a" {
				t.Fatalf("direct call = %v, %v", got, err)
			}
			for i := range 300 {
				ctx := WithStickyKey(context.Background(), fmt.Sprint("k", i))
				ep, err := b.Endpoint()
				if err != nil {
					t.Fatal(err)
				}
				got, err := ep(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if got == "a" {
					t.Fatalf("pick %d returned the closing instance", i)
				}
			}
		})
	}
}

func TestBalancersReturnAnUnavailableInstanceWhenNothingElseIsLeft(t *testing.T) {
	for _, name := range balancerNames {
		t.Run(name+" still answers when every instance is closing", func(t *testing.T) {
			e, _, fl := newTestEndpointer(t, []string{"a", "b"})
			b := balancers(t, e)[name]
			eps, _ := e.Endpoints()
			for i, n := range []string{"a", "b"} {
				fl.get(t, n).closing.Store(true)
				if _, err := eps[i](context.Background(), nil); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := call(b); err != nil {
				t.Fatalf("pick with every instance closing: %v, want a closing instance", err)
			}
		})
	}
}

func TestBalancersReturnNoEndpointsForAnEmptySet(t *testing.T) {
	e, _, _ := newTestEndpointer(t, nil)
	for name, b := range balancers(t, e) {
		t.Run(name+" returns lb.ErrNoEndpoints", func(t *testing.T) {
			if _, err := b.Endpoint(); !errors.Is(err, kitlb.ErrNoEndpoints) {
				t.Fatalf("got %v, want lb.ErrNoEndpoints", err)
			}
		})
	}
}

func TestPickingAllocatesNothing(t *testing.T) {
	e, _, _ := newTestEndpointer(t, names(10))
	for name, b := range balancers(t, e) {
		t.Run(name+" picks without allocating", func(t *testing.T) {
			var ep kitendpoint.Endpoint
			allocs := testing.AllocsPerRun(1000, func() { ep, _ = b.Endpoint() })
			if allocs != 0 || ep == nil {
				t.Fatalf("pick allocated %v times per run (endpoint %v), want 0", allocs, ep != nil)
			}
		})
	}
}

func BenchmarkPick(b *testing.B) {
	e, err := NewEndpointer(newChanInstancer(names(10)...), benchFactory)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	for name, bal := range map[string]func() kitlb.Balancer{
		"round robin": func() kitlb.Balancer { x, _ := NewRoundRobin(e); return x },
		"random":      func() kitlb.Balancer { x, _ := NewRandom(e); return x },
		"p2c":         func() kitlb.Balancer { x, _ := NewP2C(e); return x },
		"sticky":      func() kitlb.Balancer { x, _ := NewSticky(e); return x },
	} {
		lb := bal()
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := lb.Endpoint(); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
