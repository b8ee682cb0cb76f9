package sd_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	kitsd "github.com/go-kit/kit/sd"
	"go.uber.org/goleak"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// TestMain runs the suite with the default watch mode (recursive), or with
// GRACEKIT_SD_WATCH_MODE=per-node the per-node one; TestKeyInvariantsInBothWatchModes
// runs the key cases in both either way. Tests that leave the server alone
// share one (sharedZK); goleak checks after it stopped.
func TestMain(m *testing.M) {
	switch mode := os.Getenv("GRACEKIT_SD_WATCH_MODE"); mode {
	case "", sd.WatchRecursive.String():
	case sd.WatchPerNode.String():
		sd.SetDefaultWatchMode(sd.WatchPerNode)
	default:
		fmt.Fprintf(os.Stderr, "GRACEKIT_SD_WATCH_MODE=%q: want %q or %q\n", mode, sd.WatchRecursive, sd.WatchPerNode)
		os.Exit(2)
	}
	// The shared server reaps empty containers as often as New's do: the
	// container tests on it wait for the reaper.
	goleak.VerifyTestMain(zktest.SharedMain(m, zktest.ContainerCheck(zktest.DefaultContainerCheck)))
}

// sharedZK is the test binary's shared ZooKeeper server and a base path no
// other test uses (pass sd.BasePath(base) to every Registrar, Instancer and
// Catalog, and write raw nodes under base): the test must leave the server
// alone and count nothing server-wide (see zktest's package doc).
func sharedZK(t testing.TB) (*zktest.Cluster, string) {
	t.Helper()
	return zktest.Shared(t), zktest.UniquePath(t)
}

const waitLimit = testutil.WaitLimit

func newClient(t testing.TB, c *zktest.Cluster, opts ...sd.ClientOption) *sd.Client {
	t.Helper()
	opts = append([]sd.ClientOption{sd.SessionTimeout(2 * time.Second)}, opts...)
	cl, err := sd.NewClient(c.ConnectString(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func instance(service string, port int) sd.Instance {
	return sd.Instance{Name: service, ID: fmt.Sprintf("%s-%d", service, port), Address: "127.0.0.1", Port: port}
}

func register(t testing.TB, cl *sd.Client, inst sd.Instance, opts ...sd.RegistrarOption) *sd.Registrar {
	t.Helper()
	r, err := sd.NewRegistrar(cl, inst, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := r.RegisterContext(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Bounded: a test that failed with the ensemble away must end, not
		// wait for it.
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		_ = r.DeregisterContext(ctx)
	})
	return r
}

func newInstancer(t testing.TB, cl *sd.Client, service string, opts ...sd.InstancerOption) (*sd.Instancer, chan kitsd.Event) {
	t.Helper()
	in, err := sd.NewInstancer(cl, service, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan kitsd.Event, 64)
	in.Register(ch)
	t.Cleanup(func() {
		in.Deregister(ch)
		in.Stop()
	})
	return in, ch
}

// waitSet reads events until one has no error and exactly want (sorted).
func waitSet(t testing.TB, ch <-chan kitsd.Event, want ...string) kitsd.Event {
	t.Helper()
	slices.Sort(want)
	deadline := time.After(waitLimit)
	var last kitsd.Event
	for {
		select {
		case ev := <-ch:
			last = ev
			if ev.Err == nil && slices.Equal(ev.Instances, want) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no event with %v within %v; last: %v (err %v)", want, waitLimit, last.Instances, last.Err)
		}
	}
}
