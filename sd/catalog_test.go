package sd_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// waitServices waits until the Catalog lists exactly want.
func waitServices(t *testing.T, k *sd.Catalog, want ...string) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		got, changed := k.Services()
		if slices.Equal(got, want) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("services %v, want %v", got, want)
		}
	}
}

// A gateway routing every service: services appear, and vanish when their
// container node is reaped; each service's Instancer follows its instances;
// in the recursive mode the whole catalog is one watch.
func TestCatalogFollowsEveryServiceWithOneWatch(t *testing.T) {
	t.Parallel()
	for _, mode := range watchModes {
		t.Run(mode.String(), func(t *testing.T) {
			c := zktest.New(t)
			provider, consumer := newClient(t, c), newClient(t, c)
			addr := c.Servers[0].Addr()
			a := register(t, provider, instance("alpha", 5101))
			register(t, provider, instance("beta", 5201))
			// A Registrar arms a watch of its own, maybe after it returned:
			// count from a quiet server.
			base := serverWatches(t, addr)
			testutil.WaitFor(t, "the registrars' watches settled", func() bool {
				time.Sleep(100 * time.Millisecond)
				n := serverWatches(t, addr)
				defer func() { base = n }()
				return n == base
			})
			k, err := sd.NewCatalog(consumer, sd.WithWatchMode(mode))
			if err != nil {
				t.Fatal(err)
			}
			defer k.Stop()
			waitServices(t, k, "alpha", "beta")
			if k.Mode() != mode {
				t.Fatalf("Mode() = %v, want %v", k.Mode(), mode)
			}
			ins := map[string]*sd.Instancer{}
			for _, s := range []string{"alpha", "beta", "gamma"} {
				in, err := k.Instancer(s)
				if err != nil {
					t.Fatal(err)
				}
				ins[s] = in
			}
			testutil.WaitFor(t, "both services read", func() bool {
				return len(ins["alpha"].Instances()) == 1 && len(ins["beta"].Instances()) == 1
			})
			if mode == sd.WatchRecursive {
				// One recursive watch, counted twice by mntr (see
				// TestRecursiveModeHoldsOneWatchPerService), for three services.
				if got := serverWatches(t, addr) - base; got != 2 {
					t.Fatalf("%d watches on the server for the catalog, want one (2 in mntr)", got)
				}
			}
			// A new service and its instance.
			register(t, provider, instance("gamma", 5301))
			waitServices(t, k, "alpha", "beta", "gamma")
			testutil.WaitFor(t, "gamma's instance", func() bool { return len(ins["gamma"].Instances()) == 1 })
			// A status flip inside one service.
			if err := a.SetStatus(context.Background(), sd.StatusOutOfService); err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, "alpha out of service", func() bool { return len(ins["alpha"].Instances()) == 0 })
			// The last instance leaves: the container is reaped, the service goes.
			if err := a.DeregisterContext(context.Background()); err != nil {
				t.Fatal(err)
			}
			waitServices(t, k, "beta", "gamma")
			// And comes back.
			register(t, provider, instance("alpha", 5102))
			waitServices(t, k, "alpha", "beta", "gamma")
			testutil.WaitFor(t, "alpha back", func() bool { return len(ins["alpha"].Instances()) == 1 })
			// An Instancer its owner stops leaves the others running.
			ins["beta"].Stop()
			register(t, provider, instance("gamma", 5302))
			testutil.WaitFor(t, "gamma's second instance", func() bool { return len(ins["gamma"].Instances()) == 2 })
		})
	}
}
