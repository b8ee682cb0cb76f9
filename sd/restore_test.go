package sd_test

import (
	"context"
	"fmt"
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

// The session timeout of the restore tests' clients.
const restoreSession = 2 * time.Second

// restoreSlot is an address of a connect string where the restored server
// runs once target is set; until then a dial to it fails, as a dial to a
// server not yet started does. Every other address is dialled as given.
type restoreSlot struct {
	addr   string
	target atomic.Pointer[string]
}

func newRestoreSlot(t *testing.T) *restoreSlot {
	t.Helper()
	return &restoreSlot{addr: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))}
}

// dialer dials through the slot and counts in n the dials that reached the
// restored server.
func (s *restoreSlot) dialer(n *atomic.Int64) sd.DialFunc {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		if address == s.addr {
			p := s.target.Load()
			if p == nil {
				return nil, fmt.Errorf("dial %s: the restored server is not running yet", address)
			}
			n.Add(1)
			address = *p
		}
		return net.DialTimeout(network, address, timeout)
	}
}

// restoreFeed keeps the last set an Instancer published.
type restoreFeed struct {
	name string
	in   *sd.Instancer
	mu   sync.Mutex
	last kitsd.Event
	n    int
}

func followInstancer(t *testing.T, name string, in *sd.Instancer) *restoreFeed {
	t.Helper()
	f := &restoreFeed{name: name, in: in}
	ch := make(chan kitsd.Event, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range ch {
			f.mu.Lock()
			f.last, f.n = ev, f.n+1
			f.mu.Unlock()
		}
	}()
	in.Register(ch)
	t.Cleanup(func() {
		in.Deregister(ch)
		in.Stop()
		close(ch)
		<-done
	})
	return f
}

// shows tells what is wrong with the last set published, "" when it is
// want (sorted) without an error.
func (f *restoreFeed) shows(want ...string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n > 0 && f.last.Err == nil && slices.Equal(f.last.Instances, want) {
		return ""
	}
	return fmt.Sprintf("%s published %v (err %v, %d sets), want %v", f.name, f.last.Instances, f.last.Err, f.n, want)
}

// restoreCatalog is a Catalog and its name in messages.
type restoreCatalog struct {
	name string
	k    *sd.Catalog
}

func (c restoreCatalog) lists(want ...string) string {
	if got, _ := c.k.Services(); !slices.Equal(got, want) {
		return fmt.Sprintf("%s lists %v, want %v", c.name, got, want)
	}
	return ""
}

// waitAll polls checks until every one says "" and returns how long that
// took, or fails the test with what they said last once bound passed.
func waitAll(t *testing.T, what string, bound time.Duration, checks ...func() string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		var wrong []string
		for _, c := range checks {
			if s := c(); s != "" {
				wrong = append(wrong, s)
			}
		}
		if len(wrong) == 0 {
			return time.Since(start)
		}
		if time.Since(start) > bound {
			t.Fatalf("%s: not within %v:\n\t%s", what, bound, strings.Join(wrong, "\n\t"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func createPersistent(t *testing.T, w testutil.ZK, p string, data []byte) {
	t.Helper()
	if _, err := w.Create(p, data, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create %s: %v", p, err)
	}
}

func restoreInstance(port int) sd.Instance {
	return sd.Instance{Name: "restore", ID: fmt.Sprintf("restore-%d", port), Address: "127.0.0.1", Port: port}
}

// A standalone server is replaced by one started from an older copy of
// its data (a backup taken 60 writes before), at another address of the
// connect string. Every session had seen zxids the restored server never
// reached (the test waits until each has), so it refuses each of them; once
// a session has had no server for its timeout and the restored server,
// asked, is behind it, the session is lost, and a new one from zxid 0,
// synced, takes its place. Within five session timeouts of the switch the
// provider's Registrar is registered again (in its new session: the
// backup's node of its old session expired on the restored server) and
// every consumer, an Instancer and a Catalog in each watch mode, publishes
// the restored server's truth, the re-registration included.
func TestARestoredEnsembleTakesTheProviderAndItsConsumersBack(t *testing.T) {
	t.Parallel()
	a := zktest.New(t)
	w := testutil.ZKConn(t, a.Addrs())
	for _, p := range []string{"/services", "/services/restore", "/services/gone"} {
		createPersistent(t, w, p, nil)
	}
	old := restoreInstance(7601) // in the backup only
	data, err := sd.CuratorCodec{}.Encode(old)
	if err != nil {
		t.Fatal(err)
	}
	createPersistent(t, w, "/services/restore/"+old.ID, data)

	slot := newRestoreSlot(t)
	connect := a.Servers[0].Addr() + "," + slot.addr
	var dials [3]atomic.Int64 // to the restored server: provider, recursive consumer, per-node consumer
	var clients []*sd.Client
	var evMu sync.Mutex
	var events []string // every session event, for a failure's message
	client := func(i int) *sd.Client {
		onEvent := func(ev sd.SessionEvent) {
			evMu.Lock()
			defer evMu.Unlock()
			events = append(events, fmt.Sprintf("%s client %d watch=%v %s %#x %s", ev.Time.Format("15:04:05.000"), i, ev.Watch, ev.State, ev.SessionID, ev.Server))
		}
		cl, err := sd.NewClient(connect, sd.SessionTimeout(restoreSession), sd.Dialer(slot.dialer(&dials[i])), sd.OnSessionEvent(onEvent))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		clients = append(clients, cl)
		return cl
	}
	provider := client(0)
	reg, err := sd.NewRegistrar(provider, restoreInstance(7610))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLimit)
	defer cancel()
	if err := reg.RegisterContext(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = reg.DeregisterContext(ctx)
	})

	var feeds []*restoreFeed
	var catalogs []restoreCatalog
	for i, mode := range []sd.WatchMode{sd.WatchRecursive, sd.WatchPerNode} {
		cl := client(1 + i)
		in, err := sd.NewInstancer(cl, "restore", sd.WithWatchMode(mode))
		if err != nil {
			t.Fatal(err)
		}
		feeds = append(feeds, followInstancer(t, mode.String()+" Instancer", in))
		k, err := sd.NewCatalog(cl, sd.WithWatchMode(mode))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(k.Stop)
		catalogs = append(catalogs, restoreCatalog{mode.String() + " Catalog", k})
	}
	all := func(instances []string, services []string) []func() string {
		var checks []func() string
		for _, f := range feeds {
			checks = append(checks, func() string { return f.shows(instances...) })
		}
		for _, k := range catalogs {
			checks = append(checks, func() string { return k.lists(services...) })
		}
		return checks
	}
	waitAll(t, "the first sets", testutil.WaitLimit, all([]string{"127.0.0.1:7601", "127.0.0.1:7610"}, []string{"gone", "restore"})...)
	oldSession := provider.SessionID()

	// The backup. The provider's node is in it, with its session.
	b := a.CopyOf(t, a.Servers[0])
	bAddr := b.Servers[0].Addr()
	// 60 writes the backup misses, and the consumers see.
	if err := w.Delete("/services/restore/"+old.ID, -1); err != nil {
		t.Fatal(err)
	}
	data, err = sd.CuratorCodec{}.Encode(restoreInstance(7602))
	if err != nil {
		t.Fatal(err)
	}
	createPersistent(t, w, "/services/restore/restore-7602", data)
	if err := w.Delete("/services/gone", -1); err != nil {
		t.Fatal(err)
	}
	createPersistent(t, w, "/services/new", nil)
	for i := range 56 {
		createPersistent(t, w, fmt.Sprintf("/filler-%d", i), nil)
	}
	_, last, err := w.Exists("/filler-55")
	if err != nil {
		t.Fatal(err)
	}
	waitAll(t, "the sets after the backup", testutil.WaitLimit, all([]string{"127.0.0.1:7602", "127.0.0.1:7610"}, []string{"new", "restore"})...)
	// Every session has seen the last of them (a read's or a ping's zxid),
	// so each is ahead of the backup and its few writes of its own when it
	// starts (the expiries of the sessions it holds).
	waitAll(t, "every session past the backup", testutil.WaitLimit, func() string {
		for i, cl := range clients {
			if z := sd.SeenZxid(cl); z < last.Czxid {
				return fmt.Sprintf("client %d has seen zxid %#x, not yet %#x", i, z, last.Czxid)
			}
		}
		return ""
	})

	// The switch: the restored server runs, the original stops.
	if err := b.StartAll(); err != nil {
		t.Fatal(err)
	}
	slot.target.Store(&bAddr)
	if err := a.Servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	switched := time.Now()
	var before [3]int64
	for i := range dials {
		before[i] = dials[i].Load()
	}
	since := func() (n [3]int64) {
		for i := range dials {
			n[i] = dials[i].Load() - before[i]
		}
		return n
	}
	defer func() {
		t.Logf("%v after the switch: dials to the restored server (provider, recursive consumer, per-node consumer) %v; the recursive consumer's watch sessions %+v",
			time.Since(switched).Round(time.Millisecond), since(), clients[1].WatchSessionStats())
		if t.Failed() {
			evMu.Lock()
			defer evMu.Unlock()
			t.Logf("switched at %s (%s restored, %s original); session events:\n\t%s",
				switched.Format("15:04:05.000"), bAddr, a.Servers[0].Addr(), strings.Join(events, "\n\t"))
		}
	}()
	zb := testutil.ZKConn(t, []string{bAddr})
	var czxid atomic.Int64 // of the provider's node on the restored server
	registered := func() string {
		sid := provider.SessionID()
		_, st, err := zb.Conn.Get("/services/restore/restore-7610")
		switch {
		case err != nil:
			return fmt.Sprintf("the provider's node on the restored server: %v (provider %s, session %#x)", err, provider.State(), sid)
		case sid == 0 || sid == oldSession || st.EphemeralOwner != sid:
			return fmt.Sprintf("the provider's node on the restored server is owned by %#x; the provider's session is %#x (%s), its session before the switch %#x",
				st.EphemeralOwner, sid, provider.State(), oldSession)
		}
		czxid.Store(st.Czxid)
		return ""
	}
	reregistration := func(f *restoreFeed) func() string {
		return func() string {
			for _, inst := range f.in.Instances() {
				if inst.ID == "restore-7610" && (inst.Czxid != czxid.Load() || inst.EphemeralOwner != provider.SessionID()) {
					return fmt.Sprintf("%s publishes the provider's node of czxid %#x owned by %#x, not its re-registration (czxid %#x, owner %#x)",
						f.name, inst.Czxid, inst.EphemeralOwner, czxid.Load(), provider.SessionID())
				}
			}
			return ""
		}
	}
	checks := append([]func() string{registered}, all([]string{"127.0.0.1:7601", "127.0.0.1:7610"}, []string{"gone", "restore"})...)
	for _, f := range feeds {
		checks = append(checks, reregistration(f))
	}
	bound := 5 * restoreSession
	took := waitAll(t, "the provider registered again and the consumers showing the restored server's truth", bound, checks...)
	after := since()
	t.Logf("restored in %v", took.Round(time.Millisecond))
	// A refusing server sees a few sessions a second from each Client, not
	// hundreds: each Client has at most two sessions, each backing off.
	limit := int64(4*took.Seconds()) + 4
	for i, n := range after {
		if n > limit {
			t.Errorf("client %d dialled the restored server %d times in %v, want at most %d", i, n, took.Round(time.Millisecond), limit)
		}
	}
}

// A server that accepts the watch session's handshake (here one behind
// the consumer whose handshakes lose their zxid, as the experiment
// did) and whose listing the fence then refuses drops the session right
// after it began. That counts as a failed attempt: the session backs off
// rather than reconnect at once, so the server sees a few sessions a
// second, not thousands. Once the session has had no live connection for
// its timeout, it is lost: a new one, synced, takes the server's set.
func TestAWatchSessionDroppedRightAfterItsHandshakeBacksOff(t *testing.T) {
	t.Parallel()
	a := zktest.New(t)
	w := testutil.ZKConn(t, a.Addrs())
	for _, p := range []string{"/services", "/services/storm"} {
		createPersistent(t, w, p, nil)
	}
	for _, port := range []int{7701, 7702} {
		inst := sd.Instance{Name: "storm", ID: fmt.Sprintf("storm-%d", port), Address: "127.0.0.1", Port: port}
		data, err := sd.CuratorCodec{}.Encode(inst)
		if err != nil {
			t.Fatal(err)
		}
		createPersistent(t, w, "/services/storm/"+inst.ID, data)
	}
	b := a.CopyOf(t, a.Servers[0])
	bAddr := b.Servers[0].Addr()
	if err := w.Delete("/services/storm/storm-7701", -1); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		createPersistent(t, w, fmt.Sprintf("/filler-%d", i), nil)
	}
	// One address in the connect string: the original's, then the server
	// behind's, as a standalone server replaced in place.
	slot := newRestoreSlot(t)
	aAddr := a.Servers[0].Addr()
	slot.target.Store(&aAddr)
	var toB atomic.Int64
	through := slot.dialer(new(atomic.Int64))
	dial := func(network, address string, timeout time.Duration) (net.Conn, error) {
		conn, err := through(network, address, timeout)
		if err != nil || conn.RemoteAddr().String() != bAddr {
			return conn, err
		}
		toB.Add(1)
		return &zeroZxidConn{Conn: conn}, nil
	}
	cl, err := sd.NewClient(slot.addr, sd.SessionTimeout(restoreSession), sd.Dialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	in, err := sd.NewInstancer(cl, "storm", sd.WithWatchMode(sd.WatchRecursive))
	if err != nil {
		t.Fatal(err)
	}
	feed := followInstancer(t, "recursive Instancer", in)
	k, err := sd.NewCatalog(cl, sd.WithWatchMode(sd.WatchRecursive))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	waitAll(t, "the set", testutil.WaitLimit, func() string { return feed.shows("127.0.0.1:7702") })

	if err := b.StartAll(); err != nil {
		t.Fatal(err)
	}
	slot.target.Store(&bAddr)
	if err := a.Servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	from, stats := toB.Load(), cl.WatchSessionStats()
	const window = 3 * time.Second
	time.Sleep(window) // a rate, measured over a window
	n := toB.Load() - from
	now := cl.WatchSessionStats()
	t.Logf("%d dials to the server behind in %v; watch sessions %+v, then %+v", n, window, stats, now)
	if limit := int64(5 * window.Seconds()); n > limit {
		t.Fatalf("%d sessions dialled to the server behind in %v (watch sessions %+v, then %+v): want at most %d, a few a second",
			n, window, stats, now, limit)
	}
	// Only the server behind is left: the session was lost, and the new
	// one publishes its set.
	waitAll(t, "the set of the only server", 5*restoreSession, func() string { return feed.shows("127.0.0.1:7701", "127.0.0.1:7702") })
}

// zeroZxidConn zeroes lastZxidSeen in the handshake, the connection's
// first write (length 4, protocolVersion 4, lastZxidSeen 8, ...).
type zeroZxidConn struct {
	net.Conn
	written bool
}

func (c *zeroZxidConn) Write(p []byte) (int, error) {
	if !c.written {
		c.written = true
		if len(p) >= 16 {
			p = slices.Clone(p)
			clear(p[8:16])
		}
	}
	return c.Conn.Write(p)
}

// A whole-ensemble outage longer than the session timeout is not a
// restore: the ensemble comes back with its data and its sessions (a
// restarted server gives each a fresh timeout), and a session that resumes
// in time keeps its ephemeral nodes. So the provider's session and node
// (same czxid) survive, and so does the consumer's watch session: a session
// is lost only when a server that runs is behind it, not merely when no
// server answered for its timeout (restore.go's tests have the other case).
func TestAnEnsembleOutageLongerThanTheSessionKeepsTheSessions(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	// The restarted server gives each session a fresh timeout: the client
	// must be back within it. go-zookeeper tries a round of the servers a
	// second, and on a loaded machine the restarted JVM answers slowly: 2 s
	// was not enough under make stress (both sessions expired).
	const outageSession = 8 * time.Second
	// expired: whether the Client saw its own or its watch session expire.
	type expired struct{ own, watch atomic.Bool }
	newC := func(ex *expired) *sd.Client {
		cl, err := sd.NewClient(c.ConnectString(), sd.SessionTimeout(outageSession), sd.OnSessionEvent(func(e sd.SessionEvent) {
			if e.Expired() && e.Watch {
				ex.watch.Store(true)
			} else if e.Expired() {
				ex.own.Store(true)
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	var providerExpired, consumerExpired expired
	provider, consumer := newC(&providerExpired), newC(&consumerExpired)
	reg, err := sd.NewRegistrar(provider, restoreInstance(7801))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLimit)
	defer cancel()
	if err := reg.RegisterContext(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = reg.DeregisterContext(ctx)
	})
	in, err := sd.NewInstancer(consumer, "restore", sd.WithWatchMode(sd.WatchRecursive))
	if err != nil {
		t.Fatal(err)
	}
	feed := followInstancer(t, "recursive Instancer", in)
	waitAll(t, "the set", testutil.WaitLimit, func() string { return feed.shows("127.0.0.1:7801") })
	own, czxid := provider.SessionID(), reg.Czxid()
	watch, _ := sd.WatchSessionID(consumer)

	if err := c.StopAll(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(outageSession + time.Second) // the outage: past the session timeout
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	look := testutil.ZKConn(t, c.Addrs())
	waitAll(t, "both sessions back", testutil.WaitLimit, func() string {
		if provider.State() != sd.StateHasSession || consumer.State() != sd.StateHasSession {
			return fmt.Sprintf("provider %s, consumer %s", provider.State(), consumer.State())
		}
		return ""
	}, func() string { return feed.shows("127.0.0.1:7801") })
	// Neither session may be given up by the client: the server is not
	// behind them (lost.go). The restarted server re-arms each session's
	// timeout when it loads its data, and expires one whose client was not
	// back within it: under make stress a starved client was not, for
	// either session (three times in thirteen runs, with 8 s). A session
	// the server expired is replaced, logged, and its node then the new
	// session's.
	if own, watch := sd.Losses(provider); own != 0 || watch != 0 {
		t.Errorf("the provider's Client gave up %d own and %d watch sessions as lost, want none: the server is not behind them", own, watch)
	}
	if own, watch := sd.Losses(consumer); own != 0 || watch != 0 {
		t.Errorf("the consumer's Client gave up %d own and %d watch sessions as lost, want none: the server is not behind them", own, watch)
	}
	if now := provider.SessionID(); now != own {
		if !providerExpired.own.Load() {
			t.Errorf("the provider's session went from %#x to %#x over the outage without an expiry: want it resumed", own, now)
		} else {
			t.Logf("the server expired the provider's session %#x over the outage; now %#x", own, now)
		}
		own, czxid = now, 0
	}
	if now, _ := sd.WatchSessionID(consumer); now != watch {
		if !consumerExpired.watch.Load() {
			t.Errorf("the watch session went from %#x to %#x over the outage without an expiry: want it resumed", watch, now)
		} else {
			t.Logf("the server expired the consumer's watch session %#x over the outage; now %#x", watch, now)
		}
	}
	_, st, err := look.Get(reg.Path())
	if err != nil || (czxid != 0 && st.Czxid != czxid) || st.EphemeralOwner != own {
		t.Fatalf("the provider's node after the outage: %+v, %v; want czxid %#x owned by %#x", st, err, czxid, own)
	}
}
