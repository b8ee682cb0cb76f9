package sd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"slices"
	"sort"
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

func TestRegisterDiscoverDeregister(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	in, ch := newInstancer(t, consumer, "orders", at)
	waitSet(t, ch) // an empty set: the service does not exist yet

	r1 := register(t, provider, instance("orders", 8001), at)
	r2 := register(t, provider, instance("orders", 8002), at)
	waitSet(t, ch, "127.0.0.1:8001", "127.0.0.1:8002")
	if got := in.Instances(); len(got) != 2 || got[0].ID != "orders-8001" || got[0].Czxid == 0 {
		t.Fatalf("Instances() = %+v", got)
	}

	if err := r1.DeregisterContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch, "127.0.0.1:8002")
	if err := r1.DeregisterContext(context.Background()); err != nil {
		t.Fatalf("a second Deregister failed: %v", err)
	}
	r2.Deregister()
	waitSet(t, ch)
}

func TestRegisteredBytesHaveTheFixtureShape(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	cl := newClient(t, c)
	r := register(t, cl, sd.Instance{Name: "quote-service", Address: "10.0.0.12", Port: 8081}, at)
	data, stat, err := testutil.ZKConn(t, c.Addrs()).Get(r.Path())
	if err != nil {
		t.Fatal(err)
	}
	if stat.EphemeralOwner != cl.SessionID() {
		t.Fatalf("node owned by 0x%x, not our session 0x%x", stat.EphemeralOwner, cl.SessionID())
	}
	var got, want map[string]any
	fx, _ := os.ReadFile("testdata/curator/spring-instance.json")
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(fx, &want)
	if !sameShape(got, want) {
		t.Fatalf("registered node\n%s\ndoes not have the shape of Curator's\n%s", data, fx)
	}
	inst, err := sd.CuratorCodec{}.Decode("quote-service", r.Instance().ID, data)
	if err != nil || inst.Port != 8081 || inst.Status() != sd.StatusUp {
		t.Fatalf("read back %+v, %v", inst, err)
	}
	// Parents are containers, as Curator makes them.
	_, pstat, err := testutil.ZKConn(t, c.Addrs()).Get(base + "/quote-service")
	if err != nil || pstat.EphemeralOwner != 0 {
		t.Fatalf("parent: %+v %v", pstat, err)
	}
}

// sameShape compares keys and JSON types recursively.
func sameShape(a, b any) bool {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for k := range av {
			if _, ok := bv[k]; !ok || !sameShape(av[k], bv[k]) {
				return false
			}
		}
		return true
	case []any:
		bv, ok := b.([]any)
		return ok && len(av) == len(bv) && (len(av) == 0 || sameShape(av[0], bv[0]))
	default:
		return reflect.TypeOf(a) == reflect.TypeOf(b)
	}
}

func TestThousandInstances(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	// A session timeout long enough for a loaded 2-core machine under -race.
	provider := newClient(t, c, sd.SessionTimeout(20*time.Second))
	consumer := newClient(t, c, sd.SessionTimeout(20*time.Second))
	const n = 1000
	want := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		want[i] = fmt.Sprintf("127.0.0.1:%d", 10000+i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := sd.NewRegistrar(provider, instance("big", 10000+i), at)
			if err == nil {
				err = r.RegisterContext(context.Background())
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	in, ch := newInstancer(t, consumer, "big", at)
	waitSet(t, ch, want...)
	// The set came from one bulk read; a watch per node is armed after it.
	if s := in.Stats(); s.BulkReads != n {
		t.Fatalf("bulk read %d nodes, want %d", s.BulkReads, n)
	}
	testutil.WaitFor(t, "a watch on every node", func() bool { return in.Stats().Fetches == n })
	// One more: only the new node is read.
	register(t, provider, instance("big", 20000), at)
	waitSet(t, ch, append(want, "127.0.0.1:20000")...)
	if s := in.Stats(); s.Fetches != n+1 || s.BulkReads != n {
		t.Fatalf("after one create %d reads and %d bulk reads in all, want %d and %d", s.Fetches, s.BulkReads, n+1, n)
	}
}

func TestStatusFlipHidesWithoutDeleting(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	r := register(t, provider, instance("pay", 9001), at)
	register(t, provider, instance("pay", 9002), at)
	_, ch := newInstancer(t, consumer, "pay", at)
	waitSet(t, ch, "127.0.0.1:9001", "127.0.0.1:9002")

	if err := r.SetStatus(context.Background(), sd.StatusOutOfService); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch, "127.0.0.1:9002")
	if ok, _, err := testutil.ZKConn(t, c.Addrs()).Exists(r.Path()); err != nil || !ok {
		t.Fatalf("the node was deleted: %v %v", ok, err)
	}
	if err := r.SetStatus(context.Background(), sd.StatusUp); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch, "127.0.0.1:9001", "127.0.0.1:9002")
	if err := r.SetStatus(context.Background(), "DOWN"); err == nil {
		t.Fatal("an unknown status was accepted")
	}
}

// reregistrations records a Registrar's EventReregistered events.
type reregistrations struct {
	mu     sync.Mutex
	events []sd.RegistrarEvent
}

func (r *reregistrations) option() sd.RegistrarOption {
	return sd.OnRegistrarEvent(func(ev sd.RegistrarEvent) {
		if ev.Kind == sd.EventReregistered {
			r.mu.Lock()
			r.events = append(r.events, ev)
			r.mu.Unlock()
		}
	})
}

func (r *reregistrations) list() []sd.RegistrarEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// oncePerNewSession fails t unless the node was re-created, at most once in
// each session, and never in the expired one, old. The tests' 2 s sessions
// can expire again for real when make test starves the machine (a cold run
// once saw two re-registrations, one test in the per-node pass); a second
// re-registration in the same session is the flapping these tests look for.
func (r *reregistrations) oncePerNewSession(t *testing.T, old int64) {
	t.Helper()
	events := r.list()
	if len(events) == 0 {
		t.Fatal("no re-registration after the expiry")
	}
	perSession := map[int64]int{}
	for _, ev := range events {
		perSession[ev.SessionID]++
	}
	for sid, n := range perSession {
		if n != 1 || sid == old {
			t.Fatalf("re-registered %d times in session %#x (the expired one: %#x), want once in each new session; events: %+v", n, sid, old, events)
		}
	}
	if len(events) > 1 {
		t.Logf("the provider's session expired again: %d re-registrations, one a session: %+v", len(events), events)
	}
}

func TestSessionExpiryRecreatesTheNodeOnce(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	rec := zktest.NewSessionRecorder()
	provider := newClient(t, c, sd.Dialer(rec.Dial))
	consumer := newClient(t, c)
	rereg := new(reregistrations)
	r := register(t, provider, instance("exp", 7001), rereg.option())
	register(t, newClient(t, c), instance("exp", 7002))
	in, ch := newInstancer(t, consumer, "exp")
	waitSet(t, ch, "127.0.0.1:7001", "127.0.0.1:7002")
	_, before, _ := testutil.ZKConn(t, c.Addrs()).Get(r.Path())

	old := provider.SessionID()
	if err := rec.Expire(c.Servers[0].Addr(), old); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "a new session", func() bool { s := provider.SessionID(); return s != 0 && s != old })
	testutil.WaitFor(t, "the node re-created in the new session", func() bool {
		_, st, err := testutil.ZKConn(t, c.Addrs()).Get(r.Path())
		return err == nil && st.EphemeralOwner == provider.SessionID() && st.Czxid > before.Czxid
	})
	waitSet(t, ch, "127.0.0.1:7001", "127.0.0.1:7002")
	// Give a flapping registrar the chance to show itself.
	_, settled, _ := testutil.ZKConn(t, c.Addrs()).Get(r.Path())
	testutil.WaitFor(t, "another event round trip", func() bool {
		_, err := testutil.ZKConn(t, c.Addrs()).Sync("/services/exp")
		return err == nil
	})
	if _, st, _ := testutil.ZKConn(t, c.Addrs()).Get(r.Path()); st.Czxid != settled.Czxid {
		t.Fatalf("node re-created again: czxid %d then %d", settled.Czxid, st.Czxid)
	}
	rereg.oncePerNewSession(t, old)
	if got := in.Instances(); len(got) != 2 {
		t.Fatalf("instancer lost instances: %+v", got)
	}
}

func TestConsumerSessionExpiryRewatches(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	rec := zktest.NewSessionRecorder()
	provider := newClient(t, c)
	consumer := newClient(t, c, sd.Dialer(rec.Dial))
	register(t, provider, instance("cx", 6001))
	in, ch := newInstancer(t, consumer, "cx")
	waitSet(t, ch, "127.0.0.1:6001")
	// The session that holds the watches: the shared watch session, or
	// the client's own for per-node watches.
	session := func() int64 {
		if in.Stats().WatchMode == sd.WatchPerNode {
			return consumer.SessionID()
		}
		id, _ := sd.WatchSessionID(consumer)
		return id
	}
	old := session()
	if err := rec.Expire(c.Servers[0].Addr(), old); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "a new consumer session", func() bool { s := session(); return s != 0 && s != old })
	// Watches of the old session are gone: changes must still arrive.
	register(t, provider, instance("cx", 6002))
	waitSet(t, ch, "127.0.0.1:6001", "127.0.0.1:6002")
}

// memberLossSession is the session timeout of the tests that lose an
// ensemble member and want the session kept.
const memberLossSession = 15 * time.Second

func TestEnsembleLeaderKillLosesNothing(t *testing.T) {
	t.Parallel()
	c := zktest.New(t, zktest.Size(3))
	// Sessions that outlive the election by far: the test is about the
	// move to another member, and 4 s ones expired under a load average
	// of 20 to 50 (an election and reconnect slower than the timeout).
	provider := newClient(t, c, sd.SessionTimeout(memberLossSession))
	consumer := newClient(t, c, sd.SessionTimeout(memberLossSession))
	r := register(t, provider, instance("ha", 5001))
	_, ch := newInstancer(t, consumer, "ha")
	waitSet(t, ch, "127.0.0.1:5001")
	_, before, err := testutil.ZKConn(t, c.Addrs()).Get(r.Path())
	if err != nil {
		t.Fatal(err)
	}
	leader, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "a new leader", func() bool { l, err := c.Leader(); return err == nil && l != leader })
	register(t, provider, instance("ha", 5002))
	waitSet(t, ch, "127.0.0.1:5001", "127.0.0.1:5002")
	conn := testutil.ZKConn(t, c.Addrs())
	_, after, err := conn.Get(r.Path())
	if err != nil || after.Czxid != before.Czxid {
		t.Fatalf("the node was lost or re-created across the leader kill: %v (czxid %d -> %d)", err, before.Czxid, after.Czxid)
	}
}

func TestWholeEnsembleDownKeepsLastSetAndRecovers(t *testing.T) {
	t.Parallel()
	// The restarted server resumes the provider's session when it comes
	// back in time, and expires it when it does not (as on a loaded CI
	// machine): both must end with the node in a live session.
	for _, expire := range []bool{false, true} {
		t.Run(map[bool]string{false: "resumed", true: "expired"}[expire], func(t *testing.T) {
			t.Parallel()
			wholeEnsembleDown(t, expire)
		})
	}
}

func wholeEnsembleDown(t *testing.T, expire bool) {
	c := zktest.New(t)
	// held keeps the provider off the ensemble after the restart until
	// its session has expired there.
	var held atomic.Bool
	provider := newClient(t, c, sd.Dialer(func(network, addr string, timeout time.Duration) (net.Conn, error) {
		if held.Load() {
			return nil, errors.New("held off by the test")
		}
		return net.DialTimeout(network, addr, timeout)
	}))
	consumer := newClient(t, c)
	r := register(t, provider, instance("dark", 4001))
	in, ch := newInstancer(t, consumer, "dark")
	waitSet(t, ch, "127.0.0.1:4001")
	_, before, _ := testutil.ZKConn(t, c.Addrs()).Get(r.Path())

	held.Store(expire)
	if err := c.StopAll(); err != nil {
		t.Fatal(err)
	}
	// The consumer reports the outage with the last good set.
	deadline := time.After(waitLimit)
	for gotErr := false; !gotErr; {
		select {
		case ev := <-ch:
			gotErr = ev.Err != nil
		case <-deadline:
			t.Fatal("no error event while ZooKeeper is down")
		}
	}
	if got := in.Instances(); len(got) != 1 {
		t.Fatalf("the last set was dropped during the outage: %+v", got)
	}
	time.Sleep(3 * time.Second) // longer than the 2 s session timeout, on purpose
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	if expire {
		// The node goes with the expired session, maybe before the
		// consumer's watch session is back (its reconnect backs off): the
		// set to wait for is the one after the provider registers again.
		testutil.WaitFor(t, "the provider's session expired on the restarted server", func() bool {
			owners, err := c.Servers[0].Ephemerals()
			return err == nil && owners[before.EphemeralOwner] == nil
		})
		held.Store(false)
	}
	waitSet(t, ch, "127.0.0.1:4001")
	// Either way the node must be there, owned by the provider's session.
	// The server's own record is read (dump), not a client session's view:
	// a look through a session of the test's own, stuck in its reconnect,
	// once failed this test in CI with the provider registered.
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("last look: %s; provider state %v, registrar czxid %d", last, provider.State(), r.Czxid())
		}
	}()
	testutil.WaitFor(t, "the provider registered in a live session", func() bool {
		owners, err := c.Servers[0].Ephemerals()
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("ephemerals by session %v, the provider's session %#x (before the outage %#x)", owners, provider.SessionID(), before.EphemeralOwner)
		return slices.Contains(owners[provider.SessionID()], r.Path())
	})
	renewed := provider.SessionID() != before.EphemeralOwner
	if expire && !renewed {
		t.Fatalf("the provider kept session %#x, which the server expired", before.EphemeralOwner)
	}
	t.Logf("session after the outage: new=%v", renewed)
	register(t, provider, instance("dark", 4002))
	waitSet(t, ch, "127.0.0.1:4001", "127.0.0.1:4002")
}

func TestServicePathThatComesAndGoes(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	_, ch := newInstancer(t, consumer, "later", at)
	waitSet(t, ch)
	r := register(t, provider, instance("later", 3001), at)
	waitSet(t, ch, "127.0.0.1:3001")
	if err := r.DeregisterContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch)
	// The container node is reaped by the server once empty...
	testutil.WaitFor(t, "the empty service node reaped", func() bool {
		ok, _, err := testutil.ZKConn(t, c.Addrs()).Exists(base + "/later")
		return err == nil && !ok
	})
	// ...and the instancer still sees the service come back.
	register(t, provider, instance("later", 3002), at)
	waitSet(t, ch, "127.0.0.1:3002")
}

func TestMalformedNodesAreSkippedAndCounted(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	register(t, provider, instance("mixed", 2001), at)
	conn := testutil.ZKConn(t, c.Addrs())
	acl := zk.WorldACL(zk.PermAll)
	for name, data := range map[string]string{
		"junk":   "not json",
		"wrong":  `{"name":"mixed","id":"other","address":"h","port":1}`,
		"noaddr": `{"name":"mixed","id":"noaddr","port":1}`,
	} {
		if _, err := conn.Create(base+"/mixed/"+name, []byte(data), zk.FlagEphemeral, acl); err != nil {
			t.Fatal(err)
		}
	}
	in, ch := newInstancer(t, consumer, "mixed", at)
	waitSet(t, ch, "127.0.0.1:2001")
	if got := in.Stats().Malformed; got != 3 {
		t.Fatalf("Malformed = %d, want 3", got)
	}
	// Fixing a node brings it in.
	if _, err := conn.Set(base+"/mixed/noaddr", []byte(`{"name":"mixed","id":"noaddr","address":"127.0.0.1","port":2002}`), -1); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch, "127.0.0.1:2001", "127.0.0.1:2002")
}

func TestEvictRacingALateWatchEvent(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	r := register(t, provider, instance("ev", 1001), at)
	register(t, provider, instance("ev", 1002), at)
	in, ch := newInstancer(t, consumer, "ev", at)
	waitSet(t, ch, "127.0.0.1:1001", "127.0.0.1:1002")

	evicted, ok := in.Evict("ev-1001")
	if !ok || evicted.HostPort() != "127.0.0.1:1001" {
		t.Fatalf("Evict = %+v, %v", evicted, ok)
	}
	waitSet(t, ch, "127.0.0.1:1002")
	// A late data event for the evicted node must not bring it back. It
	// takes the node out of service: writing it UP again would end the
	// eviction (issue 16), and a recursive watch may read both writes at once.
	if err := r.SetStatus(context.Background(), sd.StatusOutOfService); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the data event handled", func() bool { return in.Stats().Fetches >= 3 })
	if got := names(in.Instances()); !slices.Equal(got, []string{"ev-1002"}) {
		t.Fatalf("after a late event: %v", got)
	}
	if err := r.SetStatus(context.Background(), sd.StatusUp); err != nil {
		t.Fatal(err)
	}
	// Gone from ZooKeeper, then re-created: it is back.
	seen := in.Stats().WatchEvents
	if err := r.DeregisterContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Per node: the data watch and the children watch fire; one recursive
	// watch reports the deletion once.
	events := int64(2)
	if in.Stats().WatchMode == sd.WatchRecursive {
		events = 1
	}
	testutil.WaitFor(t, "the deletion seen", func() bool { return in.Stats().WatchEvents >= seen+events })
	if err := r.RegisterContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch, "127.0.0.1:1001", "127.0.0.1:1002")
	if _, ok := in.Evict("nobody"); ok {
		t.Fatal("Evict of an unknown id reported success")
	}
}

func TestEvictThenRegistrationInTheSameSessionGap(t *testing.T) {
	t.Parallel()
	// The provider restarts with the same id faster than the gateway sees
	// the deletion: the newer creation zxid lifts the tombstone.
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	r := register(t, provider, instance("gap", 1101), at)
	in, ch := newInstancer(t, consumer, "gap", at)
	waitSet(t, ch, "127.0.0.1:1101")
	in.Evict("gap-1101")
	waitSet(t, ch)
	if err := r.DeregisterContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch, "127.0.0.1:1101")
}

func names(insts []sd.Instance) []string {
	out := make([]string, len(insts))
	for i, inst := range insts {
		out[i] = inst.ID
	}
	sort.Strings(out)
	return out
}

func TestIDHeldByAnotherSessionIsRefused(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	a, b := newClient(t, c), newClient(t, c)
	register(t, a, instance("dup", 9901), at)
	// b's own session opens with its first call: not within the short
	// ctx below, which is for the conflict.
	register(t, b, instance("warm", 9902), at)
	r, err := sd.NewRegistrar(b, instance("dup", 9901), at)
	if err != nil {
		t.Fatal(err)
	}
	// RegisterContext waits for the node to go until its ctx ends and
	// names the conflict only if it read the node before: on a server
	// busy with other tests' writes that first read can take longer than
	// a short ctx, which is then tried again, longer.
	var conflict *sd.ConflictError
	for d := 500 * time.Millisecond; ; d *= 2 {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		err = r.RegisterContext(ctx)
		cancel()
		if errors.As(err, &conflict) || !errors.Is(err, context.DeadlineExceeded) || d >= waitLimit {
			break
		}
		t.Logf("no conflict seen within %v: %v", d, err)
	}
	if conflict == nil || conflict.Owner != a.SessionID() {
		t.Fatalf("err = %v; want a *ConflictError naming session 0x%x", err, a.SessionID())
	}
	// Deregister from the wrong session deletes nothing.
	if err := r.DeregisterContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := testutil.ZKConn(t, c.Addrs()).Exists(r.Path()); !ok {
		t.Fatal("another session's node was deleted")
	}
}

func TestChrootAndDigestAuth(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t) // the chroot
	cl, err := sd.NewClient(c.ConnectString()+base, sd.DigestAuth("svc", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r, err := sd.NewRegistrar(cl, instance("sec", 8801))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Deregister()
	other := testutil.ZKConn(t, c.Addrs())
	full := base + r.Path()
	if _, _, err := other.Get(full); err != nil {
		t.Fatalf("a stranger cannot read the node: %v", err)
	}
	if _, err := other.Set(full, []byte("x"), -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("a stranger changed the node: %v", err)
	}
	in, err := sd.NewInstancer(cl, "sec")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Stop()
	testutil.WaitFor(t, "the chrooted instance seen", func() bool { return len(in.Instances()) == 1 })
}

// go-kit's Endpointer deregisters its channel and closes it at once; no
// send may follow, however busy the Instancer is publishing.
func TestDeregisterThenCloseIsSafeWhilePublishing(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	r := register(t, provider, instance("churn", 1201), at)
	in, _ := newInstancer(t, consumer, "churn", at)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		status := []sd.Status{sd.StatusOutOfService, sd.StatusUp}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = r.SetStatus(context.Background(), status[i%2])
		}
	}()
	start := in.Stats().Publishes
	deadline := time.Now().Add(waitLimit)
	for i := 0; i < 200 || in.Stats().Publishes < start+20; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("only %d publishes while registering and deregistering", in.Stats().Publishes-start)
		}
		ch := make(chan kitsd.Event) // unbuffered, read by nobody after Deregister
		got := make(chan struct{})
		go func() {
			defer close(got)
			for range ch {
			}
		}()
		in.Register(ch)
		in.Deregister(ch)
		close(ch)
		<-got
	}
	close(stop)
	<-done
}

// The ensemble is down longer than the session timeout and the provider
// cannot reach it when it returns, so the server expires its session: the
// consumer keeps the last set through the outage, and the provider
// re-registers in a new session once it can connect.
func TestProviderReregistersAfterItsSessionExpiredInAnOutage(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	part := zktest.NewPartition()
	provider := newClient(t, c, sd.Dialer(part.Dial))
	consumer := newClient(t, c)
	rereg := new(reregistrations)
	r := register(t, provider, instance("outage", 4101), rereg.option())
	in, ch := newInstancer(t, consumer, "outage")
	waitSet(t, ch, "127.0.0.1:4101")
	oldSession := provider.SessionID()

	part.Cut()
	if err := c.StopAll(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // down longer than the 2 s session timeout, on purpose
	if got := in.Instances(); len(got) != 1 {
		t.Fatalf("the consumer dropped its last set during the outage: %+v", got)
	}
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	// The server expires the unreachable provider's session: its node goes.
	waitSet(t, ch)
	part.Heal()
	waitSet(t, ch, "127.0.0.1:4101")
	_, st, err := testutil.ZKConn(t, c.Addrs()).Get(r.Path())
	if err != nil || st.EphemeralOwner == oldSession || st.EphemeralOwner != provider.SessionID() {
		t.Fatalf("node owner 0x%x (err %v); want the provider's new session 0x%x, not 0x%x", st.EphemeralOwner, err, provider.SessionID(), oldSession)
	}
	// The consumer can see the node before the provider has the create's
	// reply, and the event follows that reply.
	testutil.WaitFor(t, "the reregistered event", func() bool { return len(rereg.list()) > 0 })
	rereg.oncePerNewSession(t, oldSession)
}

func TestNamesThatWouldClimbThePathAreRefused(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	cl := newClient(t, c)
	for _, name := range []string{"", ".", "..", "a/b"} {
		var ce *sd.ConfigError
		if _, err := sd.NewInstancer(cl, name, at); !errors.As(err, &ce) {
			t.Errorf("NewInstancer(%q) = %v, want a *ConfigError", name, err)
		}
		if _, err := sd.NewRegistrar(cl, sd.Instance{Name: name, Address: "h", Port: 1}, at); !errors.As(err, &ce) {
			t.Errorf("NewRegistrar(name %q) = %v, want a *ConfigError", name, err)
		}
		if name == "" {
			continue // an empty id gets a UUID
		}
		if _, err := sd.NewRegistrar(cl, sd.Instance{Name: "svc", ID: name, Address: "h", Port: 1}, at); !errors.As(err, &ce) {
			t.Errorf("NewRegistrar(id %q) = %v, want a *ConfigError", name, err)
		}
	}
}

func TestWithoutBulkLoadReadsNodeByNode(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	var want []string
	for i := range 40 {
		register(t, provider, instance("small", 30000+i), at)
		want = append(want, fmt.Sprintf("127.0.0.1:%d", 30000+i))
	}
	in, ch := newInstancer(t, consumer, "small", sd.WithoutBulkLoad(), at)
	waitSet(t, ch, want...)
	if s := in.Stats(); s.BulkReads != 0 || s.Fetches != 40 {
		t.Fatalf("stats %+v, want 40 reads and no bulk read", s)
	}
}

// A load of many nodes, read in several batches, publishes every node
// once, in order, and so does the next change.
func TestABulkLoadPublishesEveryNodeInOrder(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	zc := testutil.ZKConn(t, c.Addrs())
	for _, p := range []string{base, base + "/many"} {
		if _, err := zc.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	var want []string
	for i := range 600 {
		inst := instance("many", 20000+i)
		data, err := sd.CuratorCodec{}.Encode(inst)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := zc.Create(base+"/many/"+inst.ID, data, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		want = append(want, inst.HostPort())
	}
	in, ch := newInstancer(t, newClient(t, c), "many", sd.BasePath(base))
	// In order: waitSet sorts what it wants. Read in bulk in either mode.
	waitSet(t, ch, want...)
	if s := in.Stats(); s.BulkReads != 600 {
		t.Fatalf("stats %+v, want 600 bulk reads", s)
	}
	if err := zc.Delete(base+"/many/many-20300", -1); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch, slices.Delete(slices.Clone(want), 300, 301)...)
}

func TestAnExpiredTombstoneLiftsByItself(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	register(t, provider, instance("ttl", 1301), at)
	in, ch := newInstancer(t, consumer, "ttl", sd.TombstoneTTL(300*time.Millisecond), at)
	waitSet(t, ch, "127.0.0.1:1301")
	if _, ok := in.Evict("ttl-1301"); !ok {
		t.Fatal("Evict did not know the instance")
	}
	waitSet(t, ch)
	// Nothing changes in ZooKeeper: only the TTL can bring it back.
	waitSet(t, ch, "127.0.0.1:1301")
}
