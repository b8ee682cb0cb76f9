package fxmodule_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/fx"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/lifecycle"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
)

// The randomized lifecycle test under fx: random sequences of an app's
// Start, a second Start, a Start with a cancelled ctx, a Start whose own
// hook fails, and Stop, over Discovery and Consumer sharing one session
// (provider's TestRandomLifecycleSequencesLeakNothing also expires the
// session; fxmodule takes no dialer to record it with). After the last
// Stop no node is left or appears in the next 2 s, the session is closed,
// nothing listens on the port, and none of the seed's goroutines is left
// (testutil.OwnGoroutines: the seeds run in parallel).
func TestRandomFxLifecycleSequencesLeakNothing(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	for _, seed := range []uint64{1, 7, 42, 2026} {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			t.Parallel()
			testutil.OwnGoroutines(t, func(g testutil.Goroutines) {
				t.Logf("seed %d", seed)
				zo, _, err := zk.Connect(zkc.Addrs(), 4*time.Second, zk.WithLogger(testutil.Silent{}))
				observer := testutil.ZK{Conn: zo}
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(seed, ^seed))
				port := testutil.FreePort(t)
				id := fmt.Sprintf("fx-rand-%d", seed)
				failHook := rng.IntN(3) == 0
				var (
					p    *provider.Provider
					c    *consumer.Consumer
					sess *sd.Session
				)
				app := fx.New(fx.NopLogger,
					fxmodule.Discovery, fxmodule.Consumer,
					fx.Supply(providerConfig(zkc, id, port)), fx.Provide(helloServer),
					fx.Populate(&p, &c, &sess),
					fx.Invoke(func(lc fx.Lifecycle) {
						lc.Append(fx.StartHook(func() error {
							if failHook {
								return errors.New("the database is down")
							}
							return nil
						}))
					}),
				)
				if err := app.Err(); err != nil {
					t.Fatal(err)
				}
				cancelled, cancel := context.WithCancel(context.Background())
				cancel()
				ops := []struct {
					name string
					do   func(context.Context) error
				}{
					{"Start", app.Start},
					{"Start again", app.Start},
					{"Start, ctx cancelled", func(context.Context) error { return app.Start(cancelled) }},
					{"Stop", app.Stop},
				}
				for step := range 6 {
					op := ops[rng.IntN(len(ops))]
					ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
					err := op.do(ctx)
					cancel()
					t.Logf("%d. %s: %v (provider %s, consumer %s, session %s)", step, op.name, err, p.State(), c.State(), sess.State())
					if p.State() != lifecycle.StateStarted && exists(t, observer, zkc.path("quote", id)) {
						t.Fatalf("registered while the provider is %s", p.State())
					}
					if failHook && p.State() == lifecycle.StateStarted {
						t.Fatal("the provider started although a hook of the app failed")
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				_ = app.Stop(ctx)
				// fx stops only hooks that started: the roles end wherever the
				// sequence left them, holding nothing unless started.
				for _, stop := range []func(context.Context) error{p.Stop, c.Stop} {
					_ = stop(ctx)
				}
				nodeStaysGoneFx(t, observer, zkc.path("quote", id))
				testutil.WaitFor(t, "the session closed", func() bool {
					st := sess.State()
					return st == lifecycle.StateNew || st == lifecycle.StateStopped || st == lifecycle.StateFailed
				})
				if conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second); err == nil {
					_ = conn.Close()
					t.Fatal("something still listens on the app's port")
				}
				observer.Close()
				g.Leave(1) // the test's own goroutine
			})
		})
	}
}

func nodeStaysGoneFx(t *testing.T, conn testutil.ZK, path string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if exists(t, conn, path) {
			t.Fatalf("%s exists after the last Stop", path)
		}
	}
}
