package grpcresolver_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/grpcresolver"
	"github.com/gracekit/gracekit/internal/assemblytest"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown/flush"
)

// (1) A plain grpc-go client reaches every instance, in turn.
func TestAClientSeesEveryInstanceAndRoundRobinsAcrossThem(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	for _, id := range []string{"q1", "q2", "q3"} {
		startBackend(t, zkc, id, nil)
	}
	cc := dial(t, newBuilder(t, startConsumer(t, zkc)), "gracekit:///quotes")
	waitServedBy(t, cc, "q1", "q2", "q3")

	served := map[string]int{}
	for range 300 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		id, err := get(ctx, cc)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		served[id]++
	}
	for _, id := range []string{"q1", "q2", "q3"} {
		if served[id] < 60 { // 100 each under round robin; generous
			t.Errorf("%s served %d of 300 calls: %v", id, served[id], served)
		}
	}
}

// (2) An instance that registers gets calls, without a new ClientConn.
func TestAnInstanceThatJoinsGetsCalls(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	startBackend(t, zkc, "q1", nil)
	cc := dial(t, newBuilder(t, startConsumer(t, zkc)), "gracekit:///quotes")
	waitServedBy(t, cc, "q1")
	startBackend(t, zkc, "q2", nil)
	waitServedBy(t, cc, "q1", "q2")
}

// (3) An instance set OUT_OF_SERVICE leaves the set (it still serves, so
// only the resolver can keep calls off it), and comes back when UP.
func TestAnInstanceSetOutOfServiceLeavesAtOnce(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	startBackend(t, zkc, "q1", nil)
	q2 := startBackend(t, zkc, "q2", nil)
	b := newBuilder(t, startConsumer(t, zkc))
	rec, _ := build(t, b, "gracekit:///quotes")
	cc := dial(t, b, "gracekit:///quotes")
	waitServedBy(t, cc, "q1", "q2")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := q2.reg.SetStatus(ctx, sd.StatusOutOfService); err != nil {
		t.Fatal(err)
	}
	rec.waitIDs(t, "q1")
	waitServedBy(t, cc, "q1")

	if err := q2.reg.SetStatus(ctx, sd.StatusUp); err != nil {
		t.Fatal(err)
	}
	waitServedBy(t, cc, "q1", "q2")
}

// (4) A deregistered instance leaves, while its server still runs.
func TestADeregisteredInstanceLeaves(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	startBackend(t, zkc, "q1", nil)
	q2 := startBackend(t, zkc, "q2", nil)
	cc := dial(t, newBuilder(t, startConsumer(t, zkc)), "gracekit:///quotes")
	waitServedBy(t, cc, "q1", "q2")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := q2.reg.DeregisterContext(ctx); err != nil {
		t.Fatal(err)
	}
	waitServedBy(t, cc, "q1")
}

// A service read without error and found empty is pushed empty: calls fail
// fast with UNAVAILABLE instead of reaching an instance that left.
func TestAServiceFoundEmptyIsPushedEmptyAndCallsFailFast(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	q1 := startBackend(t, zkc, "q1", nil)
	b := newBuilder(t, startConsumer(t, zkc))
	rec, _ := build(t, b, "gracekit:///quotes")
	cc := dial(t, b, "gracekit:///quotes")
	waitServedBy(t, cc, "q1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := q1.reg.DeregisterContext(ctx); err != nil {
		t.Fatal(err)
	}
	rec.waitIDs(t)
	testutil.WaitFor(t, "a call failing with UNAVAILABLE before its deadline", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := get(ctx, cc)
		return status.Code(err) == codes.Unavailable && ctx.Err() == nil
	})
}

// (5) A gateway's flush evicts the instance from the resolver at once,
// though its node is still registered and UP in ZooKeeper. The gateway
// routes quotes only through the resolver (no go-kit endpoint).
func TestAGatewayFlushEvictsFromTheResolver(t *testing.T) {
	for _, tt := range []struct {
		name    string
		handler func(b *grpcresolver.Builder, c *consumer.Consumer, secret []byte, aud string) (*flush.Handler, error)
	}{
		{"through the Builder's flush handler", func(b *grpcresolver.Builder, _ *consumer.Consumer, secret []byte, aud string) (*flush.Handler, error) {
			return b.FlushHandler(secret, []string{aud})
		}},
		{"through the consumer's own flush handler, as fxmodule.Gateway serves it", func(_ *grpcresolver.Builder, c *consumer.Consumer, secret []byte, aud string) (*flush.Handler, error) {
			return c.FlushHandler(secret, []string{aud})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) { testFlushEvictsFromTheResolver(t, tt.handler) })
	}
}

func testFlushEvictsFromTheResolver(t *testing.T, handler func(b *grpcresolver.Builder, c *consumer.Consumer, secret []byte, aud string) (*flush.Handler, error)) {
	zkc := sharedZK(t)
	startBackend(t, zkc, "q1", nil)
	q2 := startBackend(t, zkc, "q2", nil)
	c := startConsumer(t, zkc)
	b := newBuilder(t, c)
	rec, _ := build(t, b, "gracekit:///quotes")
	cc := dial(t, b, "gracekit:///quotes")
	waitServedBy(t, cc, "q1", "q2")

	secret := []byte("grpcresolver-test-secret-0123456789")
	mux := http.NewServeMux()
	gw := httptest.NewServer(mux)
	defer gw.Close()
	h, err := handler(b, c, secret, gw.URL+"/flush")
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/flush", h)
	n, err := flush.NewNotifier(flush.Self{Service: service, ID: "q2", Address: "127.0.0.1", Port: q2.port}, secret,
		flush.StaticTargets(gw.URL+"/flush"), flush.Registration(q2.reg.Czxid))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reports, err := n.Flush(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 1 || !reports[0].Acked || reports[0].Result != flush.Evicted {
		t.Fatalf("flush reports %+v, want one target that evicted", reports)
	}
	// Evict published the new set before the gateway answered; the
	// resolver pushes it from its own goroutine.
	rec.waitIDs(t, "q1")
	waitServedBy(t, cc, "q1")
	conn := testutil.ZKConn(t, zkc.Addrs())
	if ok, _, err := conn.Exists(q2.reg.Path()); err != nil || !ok {
		t.Fatalf("q2's node: exists %v, %v; want it still registered", ok, err)
	}
}

// (6) With ZooKeeper down the resolver pushes no empty list and reports
// the error; calls keep reaching the live servers, and discovery resumes
// when ZooKeeper is back.
func TestZooKeeperDownPushesNoEmptyListAndCallsGoOn(t *testing.T) {
	t.Parallel()
	zkc := ownZK(t)
	startBackend(t, zkc, "q1", nil)
	startBackend(t, zkc, "q2", nil)
	b := newBuilder(t, startConsumer(t, zkc))
	rec, _ := build(t, b, "gracekit:///quotes")
	cc := dial(t, b, "gracekit:///quotes")
	waitServedBy(t, cc, "q1", "q2")
	rec.waitIDs(t, "q1", "q2")

	var (
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		calls    atomic.Int64
		failed   atomic.Int64
		mu       sync.Mutex
		firstErr error
	)
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := get(ctx, cc)
				cancel()
				calls.Add(1)
				if err != nil {
					failed.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	if err := zkc.StopAll(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the resolver reporting the outage", func() bool {
		_, errs := rec.snapshot()
		return len(errs) > 0
	})
	_, errs := rec.snapshot()
	if !errors.Is(errs[0], sd.ErrDisconnected) {
		t.Errorf("reported %v, want sd.ErrDisconnected", errs[0])
	}
	// A resolver built during the outage (a ClientConn leaving idle mode,
	// say) starts from the Instancer's last good set.
	late, _ := build(t, b, "gracekit:///quotes")
	late.waitIDs(t, "q1", "q2")
	during := calls.Load()
	testutil.WaitFor(t, "calls while ZooKeeper is down", func() bool { return calls.Load() > during+500 })
	// Counted before the restart: the client may reconnect and the set be
	// pushed before StartAll returns.
	nStates, _ := rec.snapshot()
	if err := zkc.StartAll(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the set pushed again after the outage", func() bool {
		states, _ := rec.snapshot()
		return len(states) > len(nStates)
	})
	close(stop)
	wg.Wait()

	for _, r := range []*recorder{rec, late} {
		states, _ := r.snapshot()
		for i, s := range states {
			if len(s.Addresses) == 0 || len(s.Endpoints) == 0 {
				t.Errorf("state %d pushed an empty list: %+v", i, s)
			}
		}
	}
	rec.waitIDs(t, "q1", "q2")
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of %d calls failed; first: %v", n, calls.Load(), firstErr)
	}
	t.Logf("%d calls, none failed, %d of them after ZooKeeper stopped", calls.Load(), calls.Load()-during)
}

// An empty set read right after an outage is held back for RecoveryHold,
// then pushed, since the service is still empty.
func TestAnEmptySetRightAfterAnOutageIsHeldThenPushed(t *testing.T) {
	t.Parallel()
	const hold = 3 * time.Second
	zkc := ownZK(t)
	// q1's session outlives the outage, so that the set read at the
	// recovery has q1 and its push is when the hold starts. With a short
	// one, an outage slowed by load expired it: the recovery read the
	// service empty and held it, q1 registered again 1.7 s later, and the
	// hold, rightly counted from the recovery, ended 1.3 s after that push.
	const q1Session = 30 * time.Second
	q1 := startBackendSession(t, zkc, "q1", nil, q1Session)
	b := newBuilder(t, startConsumer(t, zkc), grpcresolver.RecoveryHold(hold))
	rec, _ := build(t, b, "gracekit:///quotes")
	rec.waitIDs(t, "q1")
	czxid := q1.reg.Czxid()
	if err := zkc.StopAll(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the resolver reporting the outage", func() bool {
		_, errs := rec.snapshot()
		return len(errs) > 0
	})
	before, _ := rec.snapshot()
	if err := zkc.StartAll(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the set pushed again after the outage", func() bool {
		states, _ := rec.snapshot()
		return len(states) > len(before)
	})
	if got := q1.reg.Czxid(); got != czxid {
		t.Fatalf("q1 registered again during the outage (czxid %d, was %d): its session expired, so the recovery's push is not when the hold started", got, czxid)
	}
	// The provider reconnects after the whole ensemble restarted. A try
	// it began while the server was starting may wait its whole
	// handshake bound, the session timeout (a cold make test once saw the
	// deregister's bound, WaitLimit alone, end first): so both.
	ctx, cancel := context.WithTimeout(context.Background(), q1Session+testutil.WaitLimit)
	defer cancel()
	if err := q1.reg.DeregisterContext(ctx); err != nil {
		t.Fatal(err)
	}
	rec.waitIDs(t)
	// Timed by the recorder as the states came, not by this test's polls
	// (which saw the recovery's push 1.8 s late once, under make stress):
	// from the push of the recovery to that of the empty set.
	states, _ := rec.snapshot()
	if held := rec.stateAt(len(states) - 1).Sub(rec.stateAt(len(before))); held < hold-time.Second {
		t.Errorf("the empty set was pushed %v after the recovery, want the %v hold", held, hold)
	}
}

// (7) Each address carries its instance: id, metadata, ports.
func TestAttributesCarryTheInstanceAndItsMetadata(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	q1 := startBackend(t, zkc, "q1", map[string]string{"zone": "eu-west-1", "version": "1.2.3"})
	b := newBuilder(t, startConsumer(t, zkc))
	rec, _ := build(t, b, "gracekit:///quotes")
	rec.waitIDs(t, "q1")
	states, _ := rec.snapshot()
	s := states[len(states)-1]
	if len(s.Addresses) != 1 || len(s.Endpoints) != 1 || len(s.Endpoints[0].Addresses) != 1 {
		t.Fatalf("state %+v, want one address and one endpoint of one address", s)
	}
	a := s.Addresses[0]
	if want := "127.0.0.1:" + strconv.Itoa(q1.port); a.Addr != want {
		t.Errorf("Addr %q, want %q", a.Addr, want)
	}
	inst, ok := grpcresolver.InstanceFromAddress(a)
	if !ok {
		t.Fatal("no instance in the address's attributes")
	}
	if inst.ID != "q1" || inst.Name != service || inst.Port != q1.port || inst.Czxid != q1.reg.Czxid() ||
		inst.Metadata["zone"] != "eu-west-1" || inst.Metadata["version"] != "1.2.3" || inst.Status() != sd.StatusUp {
		t.Errorf("instance %+v", inst)
	}
	fromEP, ok := grpcresolver.InstanceFromEndpoint(s.Endpoints[0])
	if !ok || fromEP.ID != "q1" || fromEP.Metadata["zone"] != "eu-west-1" {
		t.Errorf("instance from the endpoint: %+v, %v", fromEP, ok)
	}
	inst.Metadata["zone"] = "changed"
	if again, _ := grpcresolver.InstanceFromAddress(a); again.Metadata["zone"] != "eu-west-1" {
		t.Error("changing the returned metadata changed the address's")
	}
	if _, ok := grpcresolver.InstanceFromAddress(resolver.Address{Addr: "127.0.0.1:1"}); ok {
		t.Error("an address of another resolver has an instance")
	}

	// The same instance, pushed by another resolver, is the same address:
	// grpc-go keeps a subchannel whose address did not change.
	rec2, _ := build(t, b, "gracekit:///quotes")
	rec2.waitIDs(t, "q1")
	states2, _ := rec2.snapshot()
	if a2 := states2[len(states2)-1].Addresses[0]; !a2.Equal(a) {
		t.Errorf("the same instance made two different addresses: %v and %v", a, a2)
	}
}

// ResolveNow is a hint that never blocks and pushes no unchanged set.
func TestResolveNowDoesNotBlockNorRepushAnUnchangedSet(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	startBackend(t, zkc, "q1", nil)
	b := newBuilder(t, startConsumer(t, zkc))
	rec, r := build(t, b, "gracekit:///quotes")
	rec.waitIDs(t, "q1")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			r.ResolveNow(resolver.ResolveNowOptions{})
		}
	}()
	select {
	case <-done:
	case <-time.After(testutil.WaitLimit):
		t.Fatal("ResolveNow blocked")
	}
	startBackend(t, zkc, "q2", nil) // a later change still arrives
	rec.waitIDs(t, "q1", "q2")
	states, _ := rec.snapshot()
	if len(states) != 2 {
		t.Errorf("%d states pushed, want 2 (one per set)", len(states))
	}
}

// (8) Close stops the resolver's goroutine, even while its first load
// waits for a ZooKeeper that is down, and can be called twice.
func TestCloseLeavesNothingRunningAndIsIdempotent(t *testing.T) {
	zkc := ownZK(t)
	startBackend(t, zkc, "q1", nil)
	sess, err := sd.NewSession(zkc.ConnectString(), sd.SessionTimeout(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c := assemblytest.StartConsumer(t, sess)
	if _, err := c.Instancer(context.Background(), service); err != nil {
		t.Fatal(err)
	}
	// A consumer holds the watch session alone (its own never opens), and
	// that one is up since the load: the baseline holds it.
	b := newBuilder(t, c, grpcresolver.LoadTimeout(time.Hour))
	base := goleak.IgnoreCurrent()

	for range 20 {
		rec := &recorder{}
		r, err := b.Build(target(t, "gracekit:///quotes"), rec, resolver.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rec.waitIDs(t, "q1")
		r.Close()
		r.Close()
	}
	// The consumer keeps counting the service as routed (RoutedInstancer
	// is sticky, as Endpoint is): evicting from an Instancer nobody reads
	// is harmless, and a resolver built later finds the flush applied.
	if _, ok := b.Evicter(service); !ok {
		t.Error("the Builder no longer routes flushes for a service its consumer routed")
	}
	if err := goleak.Find(base); err != nil {
		t.Fatalf("after Close: %v", err)
	}

	// A first load that cannot finish: Close must not wait for it.
	if err := zkc.StopAll(); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	r, err := b.Build(target(t, "gracekit:///other"), rec, resolver.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { defer close(closed); r.Close(); r.Close() }()
	select {
	case <-closed:
	case <-time.After(testutil.WaitLimit):
		t.Fatal("Close waited for the first load")
	}
	if states, _ := rec.snapshot(); len(states) != 0 {
		t.Errorf("a service never loaded pushed %v", states)
	}
	if err := goleak.Find(append([]goleak.Option{base}, ignoreZKReconnect...)...); err != nil {
		t.Fatalf("after Close during a load: %v", err)
	}
	if err := zkc.StartAll(); err != nil {
		t.Fatal(err)
	}
}

// While ZooKeeper is down go-zookeeper's loop dials again in goroutines of
// its own; they are the consumer's, not the resolver's.
var ignoreZKReconnect = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/go-zookeeper/zk.(*Conn).sendLoop"),
	goleak.IgnoreAnyFunction("github.com/go-zookeeper/zk.(*Conn).recvLoop"),
	goleak.IgnoreAnyFunction("github.com/go-zookeeper/zk.(*Conn).loop.func1"),
}

// (9) A target without a service, or with an authority, gets a clear
// error: from Build, and on the RPCs of a ClientConn.
func TestABadTargetGetsAClearError(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	b := newBuilder(t, startConsumer(t, zkc))
	tests := []struct {
		give string
		want string // in the reason
	}{
		{"gracekit:///", "names no service"},
		{"gracekit:", "names no service"},
		{"gracekit://zk1:2181/quotes", "authority"},
		{"gracekit://user@/quotes", "authority"},
		{"gracekit:///a/b", "not one znode name"},
		{"gracekit:///..", "not one znode name"},
		{"gracekit:///quotes?zk=zk1:2181", "query"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			_, err := b.Build(target(t, tt.give), &recorder{}, resolver.BuildOptions{})
			var te *grpcresolver.TargetError
			if !errors.As(err, &te) {
				t.Fatalf("Build: %v, want a *TargetError", err)
			}
			if !strings.Contains(te.Reason, tt.want) {
				t.Errorf("reason %q, want it to say %q", te.Reason, tt.want)
			}
		})
	}
	for _, good := range []string{"gracekit:///quotes", "gracekit:quotes"} {
		if name, err := grpcresolver.ServiceName(target(t, good)); err != nil || name != service {
			t.Errorf("ServiceName(%s) = %q, %v", good, name, err)
		}
	}

	cc := dial(t, b, "gracekit://zk1:2181/quotes")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := get(ctx, cc)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "the ZooKeeper ensemble belongs in the Builder") {
		t.Fatalf("RPC on a target with an authority: %v, want UNAVAILABLE saying why", err)
	}
}

func TestOptionsCheckTheirInput(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	c := startConsumer(t, zkc)
	for _, tt := range []struct {
		name string
		give grpcresolver.Option
	}{
		{"an empty scheme", grpcresolver.WithScheme("")},
		{"an upper case scheme", grpcresolver.WithScheme("Gracekit")},
		{"a scheme with a colon", grpcresolver.WithScheme("grace:kit")},
		{"a nil logger", grpcresolver.WithLogger(nil)},
		{"a zero load timeout", grpcresolver.LoadTimeout(0)},
		{"a negative recovery hold", grpcresolver.RecoveryHold(-time.Second)},
	} {
		t.Run(tt.name+" is refused", func(t *testing.T) {
			if _, err := grpcresolver.NewBuilder(c, tt.give); err == nil || !strings.HasPrefix(err.Error(), "grpcresolver: ") {
				t.Errorf("NewBuilder: %v", err)
			}
		})
	}
	if _, err := grpcresolver.NewBuilder(nil); err == nil {
		t.Error("NewBuilder(nil) succeeded")
	}
	b := newBuilder(t, c, grpcresolver.WithScheme("zk-quotes"))
	if b.Scheme() != "zk-quotes" {
		t.Errorf("Scheme %q", b.Scheme())
	}
}
