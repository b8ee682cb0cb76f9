package sd_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kitsd "github.com/go-kit/kit/sd"
	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// These tests lock the cases of issue 8 (hardening) that live in sd; each
// is named after its case and failed before the fix.

// Issue 8, case 1: one child the Instancer cannot read (an ACL it lacks)
// must not blank the service; it is skipped, counted once, retried, and its
// deletion is applied at once.
func TestUnreadableChildIsSkippedCountedOnceAndRetried(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	register(t, provider, instance("acl", 8101), at)

	// A node only its owner may read, beside the readable one.
	owner := testutil.ZKConn(t, c.Addrs())
	if err := owner.AddAuth("digest", []byte("owner:pw")); err != nil {
		t.Fatal(err)
	}
	secret := base + "/acl/hidden"
	if _, err := owner.Create(secret, validNode(t, "acl", "hidden", 8102), 0, zk.DigestACL(zk.PermAll, "owner", "pw")); err != nil {
		t.Fatal(err)
	}

	in, err := sd.NewInstancerContext(ctxFor(t), consumer, "acl", at)
	if err != nil {
		t.Fatalf("the first load failed because of one unreadable node: %v", err)
	}
	t.Cleanup(in.Stop)
	ch := make(chan kitsd.Event, 64)
	in.Register(ch)
	t.Cleanup(func() { in.Deregister(ch) })
	waitSet(t, ch, "127.0.0.1:8101")
	if err := in.Err(); err != nil {
		t.Fatalf("Err() = %v; an unreadable node is skipped, not an error of the set", err)
	}

	// Retried later, but reported once per node.
	// Two reads at the first load, then one per retry: wait for three retries.
	testutil.WaitFor(t, "three retries of the unreadable node", func() bool { return in.Stats().Fetches >= 5 })
	if got := in.Stats().Unreadable; got != 1 {
		t.Fatalf("Unreadable = %d after retries, want 1 (once per node)", got)
	}

	// Readable again: the retry finds it.
	if _, err := owner.SetACL(secret, zk.WorldACL(zk.PermAll), -1); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch, "127.0.0.1:8101", "127.0.0.1:8102")

	// A new unreadable node, then its deletion, which shows at once,
	// whatever the retry's backoff.
	if _, err := owner.Create(secret+"2", validNode(t, "acl", "hidden2", 8103), 0, zk.DigestACL(zk.PermAll, "owner", "pw")); err != nil {
		t.Fatal(err)
	}
	if in.Stats().WatchMode == sd.WatchPerNode {
		testutil.WaitFor(t, "the second unreadable node counted", func() bool { return in.Stats().Unreadable == 2 })
	}
	// A recursive watch hears nothing of a child the session may not read
	// (servers with the CVE-2024-23944 fix check READ before notifying):
	// it is neither listed nor counted until a re-read lists it.
	if err := owner.Delete(secret+"2", -1); err != nil {
		t.Fatal(err)
	}
	if err := owner.Delete(secret, -1); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch, "127.0.0.1:8101")
	if err := in.Err(); err != nil {
		t.Fatalf("Err() = %v", err)
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

func validNode(t *testing.T, service, id string, port int) []byte {
	t.Helper()
	inst := sd.Instance{Name: service, ID: id, Address: "127.0.0.1", Port: port, Metadata: map[string]string{sd.MetadataStatus: "UP"}}
	b, err := sd.CuratorCodec{}.Encode(inst)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Issue 8, case 1 (first load): NewInstancerContext returns the error of a
// first load that could not read the service.
func TestFailedFirstLoadIsAnErrorNotAnEmptyService(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	owner := testutil.ZKConn(t, c.Addrs())
	if err := owner.AddAuth("digest", []byte("owner:pw")); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Create(base, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	// The service node itself cannot be listed.
	if _, err := owner.Create(base+"/locked", nil, 0, zk.DigestACL(zk.PermAll, "owner", "pw")); err != nil {
		t.Fatal(err)
	}
	consumer := newClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	in, err := sd.NewInstancerContext(ctx, consumer, "locked", at)
	if err == nil {
		in.Stop()
		t.Fatal("NewInstancerContext succeeded on a service it cannot list")
	}
	if !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("err = %v, want one that wraps zk.ErrNoAuth", err)
	}

	// The plain constructor says it through Err.
	in, err = sd.NewInstancer(consumer, "locked", at)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Stop()
	if err := in.Err(); err == nil {
		t.Fatalf("Err() = %v after a failed first load", err)
	}
	// An absent service is empty and healthy.
	in2, err := sd.NewInstancerContext(ctxFor(t), consumer, "absent", at)
	if err != nil {
		t.Fatalf("an absent service is an empty one: %v", err)
	}
	defer in2.Stop()
	if err := in2.Err(); err != nil {
		t.Fatalf("Err() = %v for an absent service", err)
	}
}

// Issue 8, case 2: with digest auth, every node the library creates,
// parents included, is changeable only by its owner: a stranger can
// neither delete a live instance nor plant a fake one.
func TestDigestAuthProtectsParentsFromStrangers(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	cl := newClient(t, c, sd.DigestAuth("svc", "s3cret"))
	r := register(t, cl, instance("guarded", 8201), at)
	in, ch := newInstancer(t, cl, "guarded", at)
	waitSet(t, ch, "127.0.0.1:8201")

	stranger := testutil.ZKConn(t, c.Addrs())
	if err := stranger.Delete(r.Path(), -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("a stranger deleting a live instance got %v, want zk.ErrNoAuth", err)
	}
	if _, err := stranger.Create(base+"/guarded/fake", validNode(t, "guarded", "fake", 6666), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("a stranger creating a fake instance got %v, want zk.ErrNoAuth", err)
	}
	if _, err := stranger.Create(base+"/fakesvc", nil, 0, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("a stranger creating a service under the base path got %v, want zk.ErrNoAuth", err)
	}
	// Still readable by anyone, as Spring consumers need.
	if _, _, err := stranger.Children(base + "/guarded"); err != nil {
		t.Fatalf("a stranger cannot list the service: %v", err)
	}
	if got := in.Instances(); len(got) != 1 {
		t.Fatalf("instances = %v", got)
	}
}

// Issue 8, case 3: ErrDisconnected stays on every event while the session
// is disconnected, whatever else is published meanwhile.
func TestDisconnectedErrorStaysUntilTheSetIsReadAgain(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	provider, consumer := newClient(t, c), newClient(t, c)
	register(t, provider, instance("dc", 8301))
	register(t, provider, instance("dc", 8302))
	in, ch := newInstancer(t, consumer, "dc", sd.TombstoneTTL(300*time.Millisecond))
	waitSet(t, ch, "127.0.0.1:8301", "127.0.0.1:8302")

	if err := c.StopAll(); err != nil {
		t.Fatal(err)
	}
	waitErr(t, ch, sd.ErrDisconnected)
	if _, ok := in.Evict("dc-8301"); !ok {
		t.Fatal("Evict found nothing")
	}
	ev := next(t, ch)
	if len(ev.Instances) != 1 || !errors.Is(ev.Err, sd.ErrDisconnected) {
		t.Fatalf("after Evict while disconnected: %v, err %v; want one instance and ErrDisconnected", ev.Instances, ev.Err)
	}
	// The tombstone expires while still disconnected.
	ev = next(t, ch)
	if len(ev.Instances) != 2 || !errors.Is(ev.Err, sd.ErrDisconnected) {
		t.Fatalf("after the tombstone expired while disconnected: %v, err %v; want two instances and ErrDisconnected", ev.Instances, ev.Err)
	}
	if !errors.Is(in.Err(), sd.ErrDisconnected) {
		t.Fatalf("Err() = %v while disconnected", in.Err())
	}
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch, "127.0.0.1:8301", "127.0.0.1:8302")
}

func next(t *testing.T, ch <-chan kitsd.Event) kitsd.Event {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(waitLimit):
		t.Fatal("no event")
		return kitsd.Event{}
	}
}

func waitErr(t *testing.T, ch <-chan kitsd.Event, want error) kitsd.Event {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case ev := <-ch:
			if errors.Is(ev.Err, want) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no event with error %v", want)
		}
	}
}

// Issue 8, case 5: a status change made while the connection is lost is
// written once it is back: ZooKeeper converges to what the Registrar wants.
func TestStatusChangeDuringAShortDisconnectConverges(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	part := zktest.NewPartition()
	provider := newClient(t, c, sd.Dialer(part.Dial), sd.SessionTimeout(4*time.Second))
	r := register(t, provider, instance("conv", 8501))
	look := testutil.ZKConn(t, c.Addrs())

	part.Cut()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := r.SetStatus(ctx, sd.StatusOutOfService)
	cancel()
	if err == nil {
		t.Fatal("SetStatus succeeded without a connection")
	}
	part.Heal()
	testutil.WaitFor(t, "OUT_OF_SERVICE in ZooKeeper", func() bool {
		data, _, err := look.Get(r.Path())
		return err == nil && strings.Contains(string(data), `"OUT_OF_SERVICE"`)
	})
	// And back, through an expiry this time.
	if err := r.SetStatus(ctxFor(t), sd.StatusUp); err != nil {
		t.Fatal(err)
	}
	data, _, _ := look.Get(r.Path())
	if !strings.Contains(string(data), `"instance_status":"UP"`) {
		t.Fatalf("node after SetStatus(UP): %s", data)
	}
}

// Issue 8, case 6: once DeregisterContext returns, even with its ctx ended
// while the keeper was busy, nothing of that registration writes to
// ZooKeeper again, and a new Register does not race the old keeper.
func TestNothingWritesAfterDeregisterReturns(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	part := zktest.NewPartition()
	provider := newClient(t, c, sd.Dialer(part.Dial), sd.SessionTimeout(4*time.Second))
	r, err := sd.NewRegistrar(provider, instance("gone", 8601))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterContext(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	look := testutil.ZKConn(t, c.Addrs())

	// The node vanishes while the provider cannot hear of it; its keeper
	// will learn on reconnect.
	part.Cut()
	if err := look.Delete(r.Path(), -1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_ = r.DeregisterContext(ctx)
	cancel()
	part.Heal()
	testutil.WaitFor(t, "reconnected", func() bool { return provider.Connected() })
	// Give a keeper every chance to re-create the node.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if ok, _, _ := look.Exists(r.Path()); ok {
			t.Fatal("the node was re-created after DeregisterContext returned")
		}
	}
	// A new registration works and does not race the old keeper (-race).
	if err := r.RegisterContext(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if err := r.DeregisterContext(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := look.Exists(r.Path()); ok {
		t.Fatal("node still there after the second Deregister")
	}
}

// Issue 8, case 8: one unresolvable host among live members does not stop
// the start; "::::" is refused when the connect string is checked.
func TestConnectStringWithAnUnresolvableHostStillConnects(t *testing.T) {
	t.Parallel()
	c := zktest.Shared(t) // it writes nothing
	connect := "no-such-host.invalid:2181," + c.ConnectString()
	cl, err := sd.NewClient(connect, sd.SessionTimeout(2*time.Second), sd.ConnectTimeout(10*time.Second))
	if err != nil {
		t.Fatalf("NewClient(%q): %v", connect, err)
	}
	cl.Close()

	if _, err := sd.NewClient("no-such-host.invalid:2181", sd.ConnectTimeout(time.Second)); err == nil {
		t.Fatal("a connect string of only unresolvable hosts connected")
	}
}

// Issue 8, case 8: "::::" and other malformed servers are refused when the
// connect string is checked (NewSession, Config checks), not at connect time.
func TestMalformedConnectStringsAreRefusedWhenChecked(t *testing.T) {
	for _, give := range []string{"::::", "::1", "host:0", "host:99999", "[::1:2181", ",", "host:2181//x", "ho st:2181"} {
		t.Run(give, func(t *testing.T) {
			_, _, err := sd.ParseConnectString(give)
			var ce *sd.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("ParseConnectString(%q) = %v, want a *sd.ConfigError", give, err)
			}
		})
	}
	for _, give := range []string{"zk1", "zk1:2181,zk2:2182/apps", "[::1]:2181", "[::1]", "10.0.0.1"} {
		if _, _, err := sd.ParseConnectString(give); err != nil {
			t.Errorf("ParseConnectString(%q) = %v", give, err)
		}
	}
}

// Issue 10: a subscriber that never reads holds up no other subscriber,
// and each gets a copy of the set it may change.
func TestASlowSubscriberHoldsUpNobodyElse(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	in, fast := newInstancer(t, consumer, "fan", at)
	waitSet(t, fast)
	stuck := make(chan kitsd.Event, 1) // takes the current set, then is never read
	in.Register(stuck)
	t.Cleanup(func() { in.Deregister(stuck) })
	for port := 8701; port < 8706; port++ {
		register(t, provider, instance("fan", port), at)
	}
	ev := waitSet(t, fast, "127.0.0.1:8701", "127.0.0.1:8702", "127.0.0.1:8703", "127.0.0.1:8704", "127.0.0.1:8705")
	ev.Instances[0] = "scribbled"
	other := make(chan kitsd.Event, 1)
	in.Register(other)
	defer in.Deregister(other)
	if got := (<-other).Instances; got[0] != "127.0.0.1:8701" {
		t.Fatalf("a subscriber's change reached another: %v", got)
	}
}

// request reads the header of the n-th write of go-zookeeper on a
// connection: the first is the connect request, which has none; then each
// write is one frame (length, xid, opcode).
func request(n int, b []byte) (xid, op int32, ok bool) {
	if n == 1 || len(b) < 12 {
		return 0, 0, false
	}
	return int32(binary.BigEndian.Uint32(b[4:8])), int32(binary.BigEndian.Uint32(b[8:12])), true
}

// createOps are the opcodes of a create: create, create2, createContainer.
var createOps = []int32{1, 15, 19}

// onWrite is a dialer whose connections pass each of go-zookeeper's writes
// to the func, with its number (the first is the connect request), to send
// to conn or not: the one shape of the request-side fault dialers below.
type onWrite func(conn net.Conn, n int, b []byte) (int, error)

func (f onWrite) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &onWriteConn{Conn: c, f: f}, nil
}

// onWriteConn counts writes without a lock: go-zookeeper writes from one
// goroutine.
type onWriteConn struct {
	net.Conn
	f      onWrite
	writes int
}

func (c *onWriteConn) Write(b []byte) (int, error) {
	c.writes++
	return c.f(c.Conn, c.writes, b)
}

// cutAtRequest is a dialer whose connection hangs up at the first create
// request (of any kind; of ops when set), as a connection lost between the
// parents' creates of a registration would: before sending it (afterSend
// false: the write fails) or once it is sent, before its reply (the
// request's fate is unknown, its call fails with zk.ErrConnectionClosed).
type cutAtRequest struct {
	afterSend bool
	ops       []int32
	done      atomic.Bool
	cuts      atomic.Int32
}

func (d *cutAtRequest) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	return onWrite(d.write).Dial(network, address, timeout)
}

func (d *cutAtRequest) write(conn net.Conn, n int, b []byte) (int, error) {
	ops := d.ops
	if ops == nil {
		ops = createOps
	}
	if _, op, ok := request(n, b); ok && slices.Contains(ops, op) && d.done.CompareAndSwap(false, true) {
		d.cuts.Add(1)
		if d.afterSend {
			n, err := conn.Write(b)
			conn.Close()
			return n, err
		}
		conn.Close() // the write below fails as on a reset connection
	}
	return conn.Write(b)
}

// Issue 24, seed 6061075698734686594: a connection lost under a
// deregistration's exists or delete (before the request is sent, or after,
// when the delete may have landed) is waited out within ctx: the node is
// gone and the Registrar says deregistered, instead of returning "sd:
// deregister <path>: zk: connection closed" with the node still there
// until the session ends.
func TestDeregisterWaitsOutAConnectionLostUnderItsDelete(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	look := testutil.ZKConn(t, c.Addrs())
	i := 0
	for _, op := range []int32{3, 2} { // exists, delete
		for _, afterSend := range []bool{false, true} {
			i++
			dial := &cutAtRequest{afterSend: afterSend, ops: []int32{op}}
			cl := newClient(t, c, sd.Dialer(dial.Dial), sd.SessionTimeout(4*time.Second))
			var deregistered atomic.Int32
			r, err := sd.NewRegistrar(cl, instance(fmt.Sprintf("cutdelete%d", i), 8620+i), at,
				sd.OnRegistrarEvent(func(ev sd.RegistrarEvent) {
					if ev.Kind == sd.EventDeregistered {
						deregistered.Add(1)
					}
				}))
			if err != nil {
				t.Fatal(err)
			}
			dial.done.Store(true) // the registration's own requests pass
			if err := r.RegisterContext(ctxFor(t)); err != nil {
				t.Fatal(err)
			}
			// SetStatus returns once the keeper reconciled, so its first
			// ExistsW is out before the cut is armed.
			if err := r.SetStatus(ctxFor(t), sd.StatusUp); err != nil {
				t.Fatal(err)
			}
			dial.done.Store(false) // the deregistration's first such request is cut
			if err := r.DeregisterContext(ctxFor(t)); err != nil {
				t.Fatalf("DeregisterContext with the connection lost under op %d (after its send: %v): %v", op, afterSend, err)
			}
			if n := dial.cuts.Load(); n != 1 {
				t.Fatalf("op %d after send %v: %d cuts, want 1", op, afterSend, n)
			}
			if ok, _, err := look.Exists(r.Path()); err != nil || ok {
				t.Fatalf("op %d after send %v: node after the deregistration: exists=%v, %v; want gone", op, afterSend, ok, err)
			}
			if n := deregistered.Load(); n != 1 {
				t.Fatalf("op %d after send %v: %d deregistered events, want 1", op, afterSend, n)
			}
		}
	}
}

// Issue 24, seed 4 of 50: a connection lost under the parents' create of
// a registration is waited out as one lost under the node's own create:
// RegisterContext registers once the connection is back, instead of
// returning "sd: create <parent>: zk: connection closed" (or the socket's
// write error).
func TestRegisterWaitsOutAConnectionLostUnderItsParentsCreate(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	look := testutil.ZKConn(t, c.Addrs())
	for i, afterSend := range []bool{false, true} {
		dial := &cutAtRequest{afterSend: afterSend}
		cl := newClient(t, c, sd.Dialer(dial.Dial), sd.SessionTimeout(4*time.Second))
		r, err := sd.NewRegistrar(cl, instance(fmt.Sprintf("cutparents%d", i), 8611), at)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.RegisterContext(ctxFor(t)); err != nil {
			t.Fatalf("RegisterContext with the connection lost under a parent's create (after its send: %v): %v", afterSend, err)
		}
		if dial.cuts.Load() != 1 {
			t.Fatalf("%d cuts, want the first create cut", dial.cuts.Load())
		}
		if _, stat, err := look.Get(r.Path()); err != nil || stat.EphemeralOwner != cl.SessionID() {
			t.Fatalf("node after the registration: %v, %+v; want it held by the client's session", err, stat)
		}
		r.Deregister()
	}
}

// A container parent reaped by the server between two of a registration's
// parent creates (it removes empty ones on its own schedule: the last
// instance of a service left, a new one registers) is made again:
// RegisterContext registers instead of returning "sd: create
// <parent>/<service>: zk: node does not exist". Found when the per-node
// pass of make test ran beside the other modules: the test above reaps
// its base path between its two registrations.
func TestRegisterWalksAgainWhenAContainerParentIsReapedUnderIt(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	look := testutil.ZKConn(t, c.Addrs())
	inst := instance("reaped", 8631)
	dial := &reapBeforeCreate{look: look, parent: base, child: base + "/" + inst.Name}
	cl := newClient(t, c, sd.Dialer(dial.Dial))
	r, err := sd.NewRegistrar(cl, inst, sd.BasePath(base))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterContext(ctxFor(t)); err != nil {
		t.Fatalf("RegisterContext with its base path reaped between its parents' creates: %v", err)
	}
	if dial.reaped.Load() != 1 {
		t.Fatalf("%d reaps, want the parent deleted once under the service's create", dial.reaped.Load())
	}
	if _, stat, err := look.Get(r.Path()); err != nil || stat.EphemeralOwner != cl.SessionID() {
		t.Fatalf("node after the registration: %v, %+v; want it held by the client's session", err, stat)
	}
	r.Deregister()
}

// reapBeforeCreate is a dialer whose connection, at the first create of
// child, deletes parent through another session first, as the server's
// container reaper would in that moment.
type reapBeforeCreate struct {
	look          testutil.ZK
	parent, child string
	reaped        atomic.Int32
}

func (d *reapBeforeCreate) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	return onWrite(d.write).Dial(network, address, timeout)
}

func (d *reapBeforeCreate) write(conn net.Conn, n int, b []byte) (int, error) {
	// A create's body starts with its path: length, then bytes.
	if _, op, ok := request(n, b); ok && slices.Contains(createOps, op) && len(b) >= 16 && d.reaped.Load() == 0 {
		if l := int(binary.BigEndian.Uint32(b[12:16])); len(b) >= 16+l && string(b[16:16+l]) == d.child {
			if err := d.look.Delete(d.parent, -1); err == nil {
				d.reaped.Add(1)
			}
		}
	}
	return conn.Write(b)
}

// dropReply is a dialer whose connections lose the server's reply to the
// first request of opcode op (the request reaches the server; pings and
// every other reply pass), as a server that never answers one request
// while the connection stays up would.
type dropReply struct {
	op      int32
	dropped atomic.Int32
}

func (d *dropReply) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	dc := &dropReplyConn{d: d, xids: map[int32]bool{}}
	dc.frameReader = &frameReader{Conn: c, edit: func(frame []byte) []byte {
		dc.mu.Lock()
		defer dc.mu.Unlock()
		if dc.xids[int32(binary.BigEndian.Uint32(frame[4:8]))] {
			return nil
		}
		return frame
	}}
	return dc, nil
}

type dropReplyConn struct {
	*frameReader
	d      *dropReply
	mu     sync.Mutex
	xids   map[int32]bool // the requests whose reply is to be dropped
	writes int
}

func (c *dropReplyConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	if xid, op, ok := request(c.writes, b); ok && op == c.d.op && c.d.dropped.CompareAndSwap(0, 1) {
		c.xids[xid] = true
	}
	c.mu.Unlock()
	return c.Conn.Write(b)
}

// frameReader reads a connection's replies a whole frame at a time and
// hands each but the first (the connect response, which has no xid) to
// edit, which returns it, rewritten or not, or nil to drop it.
type frameReader struct {
	net.Conn
	edit  func(frame []byte) []byte
	reads int
	buf   []byte // the rest of the frame being read
}

func (c *frameReader) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		var hdr [4]byte
		if _, err := io.ReadFull(c.Conn, hdr[:]); err != nil {
			return 0, err
		}
		frame := make([]byte, 4+binary.BigEndian.Uint32(hdr[:]))
		copy(frame, hdr[:])
		if _, err := io.ReadFull(c.Conn, frame[4:]); err != nil {
			return 0, err
		}
		c.reads++
		if c.reads > 1 && len(frame) >= 8 {
			frame = c.edit(frame)
		}
		c.buf = frame
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

// A Registrar's call whose reply never comes, on a connection its pings
// keep alive, gives up after twice the session timeout and is tried
// again: RegisterContext registers instead of waiting for its ctx, the
// keeper goes on writing status changes, and the lost call does not hold
// the deregistration.
func TestARegistrarCallWhoseReplyNeverComesIsTriedAgain(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	look := testutil.ZKConn(t, c.Addrs())
	for _, op := range []int32{4, 5} { // getData (the registration's first read), setData (a status change)
		dial := &dropReply{op: op}
		cl := newClient(t, c, sd.Dialer(dial.Dial), sd.SessionTimeout(2*time.Second))
		r, err := sd.NewRegistrar(cl, instance("noreply", 8620+int(op)), at)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := r.RegisterContext(ctxFor(t)); err != nil {
			t.Fatalf("op %d: RegisterContext: %v", op, err)
		}
		if op == 5 {
			if err := r.SetStatus(ctxFor(t), sd.StatusOutOfService); err != nil {
				t.Fatalf("SetStatus with its setData's reply lost: %v", err)
			}
			data, _, err := look.Get(r.Path())
			if err != nil || !strings.Contains(string(data), `"OUT_OF_SERVICE"`) {
				t.Fatalf("node after SetStatus: %s, %v", data, err)
			}
		}
		if dial.dropped.Load() != 1 {
			t.Fatalf("op %d: no reply was dropped", op)
		}
		t.Logf("op %d: done in %v with one reply lost", op, time.Since(start).Round(time.Millisecond))
		// The lost call does not hold the deregistration.
		if err := r.DeregisterContext(ctxFor(t)); err != nil {
			t.Fatalf("op %d: DeregisterContext after a lost reply: %v", op, err)
		}
		if ok, _, err := look.Exists(r.Path()); err != nil || ok {
			t.Fatalf("op %d: node after DeregisterContext: exists %v, %v", op, ok, err)
		}
	}
}

// A conflict read once is RegisterContext's answer even when its ctx ends
// amid a later try: the error names the holder, not ctx's error alone. A
// ctx that ended while a retry's read was on the wire once left
// fxmodule's Start with a bare "context deadline exceeded" (make test on
// two loaded cores). Here the retry's read is held on the wire, after the
// registrar's watch on the held node went out, and ctx is cancelled.
func TestAConflictReadBeforeIsNamedWhenCtxEndsAmidALaterTry(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	holder := newClient(t, c)
	register(t, holder, instance("held", 8701), at)

	var node atomic.Value // the held node's path
	node.Store("")
	var watched atomic.Bool
	stalled, release := make(chan struct{}), make(chan struct{})
	var stall sync.Once
	dial := onWrite(func(conn net.Conn, n int, b []byte) (int, error) {
		if _, op, ok := request(n, b); ok && len(b) >= 16 {
			p, end := string(b[16:min(len(b), 16+int(binary.BigEndian.Uint32(b[12:16])))]), 16+int(binary.BigEndian.Uint32(b[12:16]))
			switch {
			case op == 3 && p == node.Load() && end < len(b) && b[end] == 1: // exists, with a watch
				watched.Store(true)
			case op == 4 && p == node.Load() && watched.Load(): // getData: the next try's read
				stall.Do(func() { close(stalled) })
				<-release
			}
		}
		return conn.Write(b)
	})
	cl := newClient(t, c, sd.Dialer(dial.Dial), sd.SessionTimeout(30*time.Second))
	r, err := sd.NewRegistrar(cl, instance("held", 8701), at)
	if err != nil {
		t.Fatal(err)
	}
	node.Store(r.Path())
	defer close(release)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- r.RegisterContext(ctx) }()
	select {
	case <-stalled:
	case err := <-errc:
		t.Fatalf("RegisterContext = %v before its second try", err)
	case <-time.After(waitLimit):
		t.Fatal("no second try of the held node within", waitLimit)
	}
	cancel()
	select {
	case err = <-errc:
	case <-time.After(waitLimit):
		t.Fatal("RegisterContext did not return after its ctx ended")
	}
	var ce *sd.ConflictError
	if !errors.As(err, &ce) || ce.Owner != holder.SessionID() || !errors.Is(err, context.Canceled) {
		t.Fatalf("RegisterContext = %v, want a *ConflictError naming session 0x%x, and ctx's error", err, holder.SessionID())
	}
	t.Log(err)
}
