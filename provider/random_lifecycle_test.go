package provider_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/lifecycle"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// lifecycleSeeds are the seeds the randomized lifecycle test runs: fixed
// ones, so that CI repeats them, plus GRACEKIT_LIFECYCLE_SEEDS (comma
// separated) to replay or explore.
func lifecycleSeeds(t *testing.T) []uint64 {
	seeds := []uint64{1, 7, 42, 2026, 3, 5, 11, 13}
	if v := os.Getenv("GRACEKIT_LIFECYCLE_SEEDS"); v != "" {
		seeds = nil
		for _, f := range strings.Split(v, ",") {
			s, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("GRACEKIT_LIFECYCLE_SEEDS: %v", err)
			}
			seeds = append(seeds, s)
		}
	}
	return seeds
}

// The randomized lifecycle test: random sequences of Start, Stop, a second
// Start, a Start with a cancelled ctx, a failing start step and a forced
// session expiry, over a provider and a consumer sharing one Session. After
// the last Stop no node is left or appears in the next 2 s, the session is
// closed, nothing listens on the provider's port, and goroutines are back
// to what they were before: each seed counts its own (testutil.OwnGoroutines),
// so the seeds run in parallel.
func TestRandomLifecycleSequencesLeakNothing(t *testing.T) {
	t.Parallel()
	zkc := ownZK(t)
	for _, seed := range lifecycleSeeds(t) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			t.Parallel()
			testutil.OwnGoroutines(t, func(g testutil.Goroutines) {
				t.Logf("seed %d (replay with GRACEKIT_LIFECYCLE_SEEDS=%d)", seed, seed)
				zo, _, err := zk.Connect(zkc.Addrs(), 4*time.Second, zk.WithLogger(testutil.Silent{}))
				observer := testutil.ZK{Conn: zo}
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
				id := fmt.Sprintf("rand-%d", seed)
				path := "/services/life/" + id
				port := testutil.FreePort(t)
				rec := zktest.NewSessionRecorder()
				sess, err := sd.NewSession(zkc.ConnectString(), sd.SessionTimeout(4*time.Second), sd.Dialer(rec.Dial))
				if err != nil {
					t.Fatal(err)
				}
				var failNext atomic.Bool
				p, err := provider.New(sess, provider.Config{
					Instance: sd.Instance{Name: "life", ID: id, Address: "127.0.0.1", Port: port},
					Server:   &http.Server{ReadHeaderTimeout: time.Second},
					Addr:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
					ReadyCheck: func(context.Context) error {
						if failNext.Swap(false) {
							return errors.New("the database is down")
						}
						return nil
					},
					QuietWindow: 20 * time.Millisecond, MaxQuiesce: 200 * time.Millisecond, DrainTimeout: time.Second,
				})
				if err != nil {
					t.Fatal(err)
				}
				c, err := consumer.New(sess)
				if err != nil {
					t.Fatal(err)
				}
				cancelled, cancel := context.WithCancel(context.Background())
				cancel()
				ops := []struct {
					name string
					do   func(ctx context.Context) error
				}{
					{"provider Start", p.Start},
					{"provider Start again", p.Start},
					{"provider Start, ctx cancelled", func(context.Context) error { return p.Start(cancelled) }},
					{"provider Start, failing step", func(ctx context.Context) error { failNext.Store(true); return p.Start(ctx) }},
					{"provider Stop", p.Stop},
					{"consumer Start", c.Start},
					{"consumer Start, ctx cancelled", func(context.Context) error { return c.Start(cancelled) }},
					{"consumer Stop", c.Stop},
					{"session expiry", func(context.Context) error {
						id := rec.LastSession()
						if id == 0 || sess.State() != lifecycle.StateStarted {
							return nil
						}
						for _, a := range zkc.Addrs() {
							if err := rec.Expire(a, id); err == nil {
								return nil
							}
						}
						return errors.New("no server expired the session")
					}},
				}
				// Stops end a sequence: make them rarer than the rest.
				weights := []int{3, 2, 2, 2, 1, 3, 2, 1, 2}
				total := 0
				for _, w := range weights {
					total += w
				}
				for step := range 16 {
					k := rng.IntN(total)
					i := 0
					for ; k >= weights[i]; i++ {
						k -= weights[i]
					}
					op := ops[i]
					ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
					err := op.do(ctx)
					cancel()
					t.Logf("%d. %s: %v (provider %s, consumer %s, session %s)", step, op.name, err, p.State(), c.State(), sess.State())
					// What the table promises, after every step.
					if errors.Is(err, lifecycle.ErrStarted) && p.State() != lifecycle.StateStarted && c.State() != lifecycle.StateStarted {
						t.Fatalf("ErrStarted from an object not started")
					}
					if p.State() == lifecycle.StateStopped || p.State() == lifecycle.StateFailed || p.State() == lifecycle.StateNew {
						nodeGone(t, observer, path)
					}
					if p.State() == lifecycle.StateStarted {
						// Started means serving: a retry must not "succeed"
						// over a server that a failed start shut down.
						if code := get(t, "http://"+p.Addr().String()+"/readyz"); code != http.StatusOK {
							t.Fatalf("a started provider answers /readyz %d, want 200", code)
						}
					}
					if p.State() != lifecycle.StateStarted && c.State() != lifecycle.StateStarted {
						testutil.WaitFor(t, "the session without shares closed", func() bool {
							st := sess.State()
							return st == lifecycle.StateNew || st == lifecycle.StateStopped || st == lifecycle.StateFailed
						})
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				if err := p.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
					t.Logf("last provider Stop: %v", err)
				}
				if err := c.Stop(ctx); err != nil {
					t.Logf("last consumer Stop: %v", err)
				}
				for _, o := range []struct {
					name  string
					state lifecycle.State
				}{{"provider", p.State()}, {"consumer", c.State()}} {
					if o.state != lifecycle.StateStopped {
						t.Fatalf("%s after its last Stop: %s, want stopped", o.name, o.state)
					}
				}
				if err := p.Start(ctx); !errors.Is(err, lifecycle.ErrStopped) {
					t.Fatalf("provider Start after the last Stop: %v, want ErrStopped", err)
				}
				if err := c.Start(ctx); !errors.Is(err, lifecycle.ErrStopped) {
					t.Fatalf("consumer Start after the last Stop: %v, want ErrStopped", err)
				}
				nodeStaysGone(t, observer, path)
				testutil.WaitFor(t, "the session closed", func() bool {
					st := sess.State()
					return st == lifecycle.StateNew || st == lifecycle.StateStopped || st == lifecycle.StateFailed
				})
				if conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second); err == nil {
					_ = conn.Close()
					t.Fatal("something still listens on the provider's port")
				}
				observer.Close()
				g.Leave(1) // the test's own goroutine
			})
		})
	}
}

// nodeGone fails if the znode at path exists: a provider that is not
// started holds no registration.
func nodeGone(t *testing.T, conn testutil.ZK, path string) {
	t.Helper()
	if ok, _, err := conn.Exists(path); err != nil || ok {
		t.Fatalf("%s exists (%v) while the provider is not started", path, err)
	}
}
