package provider_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	pathpkg "path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
)

// sickProvider serves GET /work like startProvider, counts what it serves,
// and runs a health check whose verdict the test sets.
type sickProvider struct {
	*provider.Provider
	served atomic.Int64
	sick   atomic.Bool
	checks atomic.Int64
}

// instantCheckTimeout is the Timeout of checks that return at once: the
// default, one Interval of a few ms, would count as failed a check the
// loaded machine did not get to run within it, and take the instance out
// in a test about something else.
const instantCheckTimeout = testutil.WaitLimit

func startSickProvider(t *testing.T, zkc *zkEnv, id string, flushURLs []string, check func(sp *sickProvider) func(context.Context) error) *sickProvider {
	t.Helper()
	return startSickProviderTimeout(t, zkc, id, flushURLs, check, instantCheckTimeout)
}

// startSickProviderTimeout is startSickProvider with the checks' Timeout.
func startSickProviderTimeout(t *testing.T, zkc *zkEnv, id string, flushURLs []string, check func(sp *sickProvider) func(context.Context) error, timeout time.Duration) *sickProvider {
	t.Helper()
	sp := &sickProvider{}
	if check == nil {
		check = func(sp *sickProvider) func(context.Context) error {
			return func(context.Context) error {
				sp.checks.Add(1)
				if sp.sick.Load() {
					return errors.New("the database is down")
				}
				return nil
			}
		}
	}
	sp.Provider = startProviderWith(t, zkc, id, flushURLs, 2*time.Millisecond, func() { sp.served.Add(1) },
		provider.HealthCheck{Check: check(sp), Interval: 50 * time.Millisecond, Timeout: timeout, Failures: 3, Passes: 2, Hold: 300 * time.Millisecond})
	return sp
}

// Issue 16: the check of one of three providers starts failing under load;
// once its flush was acknowledged no consumer sends it another request (a
// gracekit gateway, and a data watcher of the node's status); when the
// check passes again it gets traffic again.
func TestASickInstanceLeavesRotationAndComesBack(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	gw := startGateway(t, zkc)
	sick := startSickProvider(t, zkc, "p1", []string{gw.url}, nil)
	startSickProvider(t, zkc, "p2", []string{gw.url}, nil)
	startSickProvider(t, zkc, "p3", []string{gw.url}, nil)

	// A data watcher, as Curator's ServiceCache or a Node client: it lists
	// only the instances whose node says UP.
	watcherClient, err := sd.NewClient(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	defer watcherClient.Close()
	watcher, err := sd.NewInstancer(watcherClient, "quote", sd.BasePath(zkc.base))
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Stop()

	load := testutil.StartLoad(4, gw.call)
	defer load.Stop()
	testutil.WaitFor(t, "p1 serving", func() bool { return sick.served.Load() > 20 })

	sick.sick.Store(true)
	testutil.WaitFor(t, "p1 out of rotation, its flush acknowledged", func() bool {
		h := sick.Health()
		return len(h) == 1 && !h[0].Healthy && !h[0].Done.IsZero()
	})
	if h := sick.Health(); h[0].Err == nil || !strings.Contains(h[0].Err.Error(), "the database is down") {
		t.Fatalf("transition %+v, want the check's error", h[0])
	}
	testutil.WaitFor(t, "the data watcher dropped p1", func() bool {
		for _, i := range watcher.Instances() {
			if i.ID == "p1" {
				return false
			}
		}
		return true
	})
	if code := get(t, "http://"+sick.Addr().String()+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz of the sick instance: %d, want 503", code)
	}
	after := sick.served.Load()
	time.Sleep(500 * time.Millisecond) // traffic goes on meanwhile; none may reach p1
	if n := sick.served.Load() - after; n != 0 {
		t.Fatalf("p1 served %d requests after its flush was acknowledged", n)
	}

	sick.sick.Store(false)
	testutil.WaitFor(t, "p1 back in rotation", func() bool {
		h := sick.Health()
		return len(h) == 2 && h[1].Healthy
	})
	back := sick.served.Load()
	testutil.WaitFor(t, "p1 gets traffic again", func() bool { return sick.served.Load() > back+20 })
	if code := get(t, "http://"+sick.Addr().String()+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after recovery: %d, want 200", code)
	}
	if n := load.Failed(); n != 0 {
		t.Fatalf("%d requests failed; first: %v", n, load.FirstErr())
	}
}

// A check that alternates pass and fail never reaches the thresholds: no
// flap, no transition.
func TestAnAlternatingCheckDoesNotFlap(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	var n atomic.Int64
	sp := startSickProvider(t, zkc, "alt", nil, func(sp *sickProvider) func(context.Context) error {
		return func(context.Context) error {
			sp.checks.Add(1)
			if n.Add(1)%2 == 0 {
				return errors.New("flaky")
			}
			return nil
		}
	})
	testutil.WaitFor(t, "20 checks", func() bool { return sp.checks.Load() >= 20 })
	if h := sp.Health(); len(h) != 0 {
		t.Fatalf("transitions %+v, want none", h)
	}
}

// Once the stop began, the instance never returns to UP, even when its
// check passes again during the stop.
func TestAStoppingInstanceNeverReturnsToUp(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	conn := testutil.ZKConn(t, zkc.Addrs())
	sp := startSickProvider(t, zkc, "stopping", nil, nil)
	sp.sick.Store(true)
	testutil.WaitFor(t, "out of rotation", func() bool { return len(sp.Health()) == 1 })
	sp.sick.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	checks := sp.checks.Load()
	time.Sleep(300 * time.Millisecond)
	if sp.checks.Load() != checks {
		t.Fatal("the health check still runs after Stop")
	}
	if ok, _, _ := conn.Exists(zkc.path("quote", "stopping")); ok {
		t.Fatal("registered after Stop")
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return testutil.Do(t, req).StatusCode
}

// hungCheck is a Check that ignores its ctx, as db.Ping does: while the
// provider is sick it blocks until release is closed. hung counts the
// calls that blocked.
func hungCheck(hung *atomic.Int64, release <-chan struct{}) func(*sickProvider) func(context.Context) error {
	return func(sp *sickProvider) func(context.Context) error {
		return func(context.Context) error {
			sp.checks.Add(1)
			if sp.sick.Load() {
				hung.Add(1)
				<-release
			}
			return nil
		}
	}
}

// Issue 22: a Check still running at its Timeout counts as failed, and no
// other Check starts until it returned; once it returns, checks run again
// and the instance comes back.
func TestAHungCheckTakesTheInstanceOutAndIsNotStartedAgain(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	conn := testutil.ZKConn(t, zkc.Addrs())
	release := make(chan struct{})
	var hung atomic.Int64
	sp := startSickProviderTimeout(t, zkc, "hung", nil, hungCheck(&hung, release), 50*time.Millisecond)
	testutil.WaitFor(t, "a first check", func() bool { return sp.checks.Load() > 0 })
	sp.sick.Store(true)
	testutil.WaitFor(t, "out of rotation", func() bool { return len(sp.Health()) == 1 })
	h := sp.Health()[0]
	if h.Healthy || h.Err == nil || !strings.Contains(h.Err.Error(), "Timeout") {
		t.Fatalf("transition %+v, want unhealthy with the Timeout's error", h)
	}
	if code := get(t, "http://"+sp.Addr().String()+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with a hung check: %d, want 503", code)
	}
	testutil.WaitFor(t, "the node OUT_OF_SERVICE", func() bool {
		return nodeStatus(t, conn, zkc.path("quote", "hung")) == sd.StatusOutOfService
	})
	// Three failed intervals took it out; one Check was started for them.
	if n := hung.Load(); n != 1 {
		t.Fatalf("%d checks hung at once, want 1: a check started while one was still running", n)
	}
	sp.sick.Store(false)
	n := sp.checks.Load()
	close(release)
	testutil.WaitFor(t, "checks start again, and it is back", func() bool {
		h := sp.Health()
		return sp.checks.Load() > n && len(h) == 2 && h[1].Healthy
	})
}

// Issue 22: Stop never waits on a Check in progress: a Check hung past the
// whole stop budget leaves every stop step to run, none skipped.
func TestStopDoesNotWaitForAHungCheck(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	gw := startGateway(t, zkc)
	release := make(chan struct{})
	defer close(release)
	var hung atomic.Int64
	sp := startSickProviderTimeout(t, zkc, "hung", []string{gw.url}, hungCheck(&hung, release), 50*time.Millisecond)
	sp.sick.Store(true)
	testutil.WaitFor(t, "a check hung", func() bool { return hung.Load() > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sp.Stop(ctx); err != nil {
		t.Fatalf("Stop with a hung check: %v", err)
	}
	for _, s := range sp.Report().Steps {
		if s.Skipped || s.Err != nil {
			t.Fatalf("stop step %+v, want run and passed", s)
		}
	}
	if r := sp.Report(); len(r.Flush) != 1 || r.Flush[0].Err != nil {
		t.Fatalf("flush reports %+v, want one acknowledged", r.Flush)
	}
}

func nodeStatus(t *testing.T, conn testutil.ZK, path string) sd.Status {
	t.Helper()
	b, _, err := conn.Get(path)
	if err != nil {
		return ""
	}
	inst, err := sd.CuratorCodec{}.Decode("quote", pathpkg.Base(path), b)
	if err != nil {
		t.Fatal(err)
	}
	return inst.Status()
}

// Issue 22: the node says who took the instance out. A failed health
// check writes out_by=health with its OUT_OF_SERVICE, in the same setData
// (one version), and the passing check removes it with UP (one more). An
// operator's drain wins over it: drained, the node says by operator, and
// a passing check only removes the health mark, never the drain.
func TestTheNodeSaysTheHealthCheckTookItOutAndTheOperatorWins(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	conn := testutil.ZKConn(t, zkc.Addrs())
	sp := startSickProvider(t, zkc, "marked", nil, nil)
	path := zkc.path("quote", "marked")
	up, st := nodeOf(t, conn, path)
	if st == nil || up.Status() != sd.StatusUp || sd.OutOfServiceBy(up) != "" {
		t.Fatalf("node at start: %+v", up.Metadata)
	}
	v := st.Version

	// written waits for the node to show the verdict: a transition is Done
	// once the status write ended, which on a loaded machine can be its
	// bound (two Intervals) passing while the Registrar keeps trying.
	written := func(what string, status sd.Status, outBy string) {
		t.Helper()
		testutil.WaitFor(t, what, func() bool {
			inst, _ := nodeOf(t, conn, path)
			return inst.Status() == status && inst.Metadata[sd.MetadataOutBy] == outBy
		})
	}

	sp.sick.Store(true)
	testutil.WaitFor(t, "out of rotation by health", func() bool {
		h := sp.Health()
		return len(h) == 1 && !h[0].Healthy && h[0].By == provider.ByHealth && !h[0].Done.IsZero()
	})
	written("its status written, marked by health", sd.StatusOutOfService, sd.OutByHealth)
	inst, st := nodeOf(t, conn, path)
	if inst.Status() != sd.StatusOutOfService || inst.Metadata[sd.MetadataOutBy] != sd.OutByHealth || sd.OutOfServiceBy(inst) != provider.ByHealth {
		t.Fatalf("node out by health: %+v", inst.Metadata)
	}
	if _, held := inst.Metadata[sd.MetadataDrainedBy]; held || sp.Registrar().DrainedBy() != "" {
		t.Fatalf("a health mark is not a drain: %+v", inst.Metadata)
	}
	if st.Version != v+1 {
		t.Fatalf("node version %d, want %d: the status and its mark are one setData", st.Version, v+1)
	}

	sp.sick.Store(false)
	testutil.WaitFor(t, "back in rotation", func() bool {
		h := sp.Health()
		return len(h) == 2 && !h[1].Done.IsZero()
	})
	written("its status written, unmarked", sd.StatusUp, "")
	inst, st = nodeOf(t, conn, path)
	if _, marked := inst.Metadata[sd.MetadataOutBy]; inst.Status() != sd.StatusUp || marked {
		t.Fatalf("node back UP: %+v, want UP without %s", inst.Metadata, sd.MetadataOutBy)
	}
	if st.Version != v+2 {
		t.Fatalf("node version %d, want %d: UP and the mark's removal are one setData", st.Version, v+2)
	}

	// Out by health, then drained: the operator wins.
	sp.sick.Store(true)
	testutil.WaitFor(t, "out by health again", func() bool {
		h := sp.Health()
		return len(h) == 3 && !h[2].Done.IsZero()
	})
	written("its status written again", sd.StatusOutOfService, sd.OutByHealth)
	data, st, err := conn.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	drained, err := sd.Drain(sd.CuratorCodec{}, "quote", "marked", data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Set(path, drained, st.Version); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the drain seen", func() bool {
		h := sp.Health()
		return len(h) == 4 && h[3].By == provider.ByOperator && !h[3].Healthy
	})
	if inst, _ := nodeOf(t, conn, path); sd.OutOfServiceBy(inst) != sd.DrainedByOperator || inst.Metadata[sd.MetadataOutBy] != sd.OutByHealth {
		t.Fatalf("node drained while out by health: %+v, want by operator", inst.Metadata)
	}
	// The check passes: its mark goes, the drain stays.
	sp.sick.Store(false)
	testutil.WaitFor(t, "the check passed again", func() bool {
		h := sp.Health()
		return len(h) == 5 && h[4].Healthy && h[4].By == provider.ByHealth
	})
	testutil.WaitFor(t, "the health mark removed", func() bool {
		inst, _ := nodeOf(t, conn, path)
		_, marked := inst.Metadata[sd.MetadataOutBy]
		return !marked
	})
	if inst, _ := nodeOf(t, conn, path); inst.Status() != sd.StatusOutOfService || sd.OutOfServiceBy(inst) != sd.DrainedByOperator {
		t.Fatalf("drained node after the check passed: %+v, want OUT_OF_SERVICE by operator", inst.Metadata)
	}

	data, st, err = conn.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	undrained, err := sd.Undrain(sd.CuratorCodec{}, "quote", "marked", data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Set(path, undrained, st.Version); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "UP after undrain, unmarked", func() bool {
		inst, _ := nodeOf(t, conn, path)
		return inst.Status() == sd.StatusUp && sd.OutOfServiceBy(inst) == "" && len(inst.Metadata[sd.MetadataOutBy]) == 0
	})
}

// Issue 40: a verdict is in Health() when it is decided, with the
// readiness it sets, not after the node's status write and the gateways'
// flush (up to two Intervals each): while the flush of an unhealthy
// verdict is under way, the instance is unready and Health() says why,
// not yet Done; once the flush is answered, the transition is Done.
func TestAHealthVerdictIsRecordedBeforeItIsCarriedOut(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(gw.Close)
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // before the provider's Stop, which flushes too
	var sick atomic.Bool
	// Interval bounds the flush at two of them: long enough that the
	// verdict cannot be recorded after a flush cut by its bound before
	// the test looks.
	p := startProviderWith(t, zkc, "early", []string{gw.URL}, 0, nil, provider.HealthCheck{
		Check: func(context.Context) error {
			if sick.Load() {
				return errors.New("the database is down")
			}
			return nil
		},
		Interval: time.Second, Failures: 1, Passes: 1, Hold: time.Millisecond,
	})

	sick.Store(true)
	select {
	case <-arrived:
	case <-time.After(testutil.WaitLimit):
		t.Fatal("the unhealthy verdict's flush never reached the gateway")
	}
	// The flush is held: the verdict was decided and is being carried out.
	if p.Readiness().Ready() {
		t.Fatal("ready while the unhealthy verdict's flush is under way")
	}
	h := p.Health()
	if len(h) != 1 {
		t.Fatalf("Health() = %+v while the instance is unready and its flush under way; want the unhealthy transition recorded when it was decided", h)
	}
	if h[0].Healthy || h[0].By != provider.ByHealth || !h[0].Done.IsZero() || h[0].Err == nil {
		t.Fatalf("transition %+v while its flush is under way: want unhealthy, by health, with the check's error, not Done", h[0])
	}
	free()
	testutil.WaitFor(t, "the transition Done once the flush was answered", func() bool { return !p.Health()[0].Done.IsZero() })
	if h := p.Health(); len(h) != 1 || h[0].Err == nil || !strings.Contains(h[0].Err.Error(), "the database is down") || h[0].Done.Before(h[0].At) {
		t.Fatalf("transition after its flush: %+v; want the check's error, Done after At", h)
	}
}
