package sd_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
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

var watchModes = []sd.WatchMode{sd.WatchRecursive, sd.WatchPerNode}

// The invariants of the Instancer, run in both watch modes in one `go test`
// (issue 15): only what feeds the set differs. Each case keeps to a base
// path of its own on the shared server, or has a server of its own when it
// stops it, so they run in parallel.
func TestKeyInvariantsInBothWatchModes(t *testing.T) {
	t.Parallel()
	for _, mode := range watchModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			for _, tt := range []struct {
				name string
				run  func(*testing.T, sd.WatchMode)
			}{
				{"a status flip is seen", statusFlip},
				{"one unreadable child never hides the rest", unreadableChild},
				{"ErrDisconnected sticks until the set was re-read", disconnectSticks},
				{"a reaped service node comes back", reapedService},
			} {
				t.Run(tt.name, func(t *testing.T) { t.Parallel(); tt.run(t, mode) })
			}
		})
	}
}

// The goroutine counts of the Instancer in both watch modes. Each case
// counts only the goroutines it started (testutil.OwnGoroutines), so they
// run in parallel with the rest of the suite.
func TestGoroutinesStayFlatInBothWatchModes(t *testing.T) {
	t.Parallel()
	for _, mode := range watchModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			for _, tt := range []struct {
				name string
				run  func(*testing.T, sd.WatchMode, testutil.Goroutines)
			}{
				{"goroutines stay flat across reconnects", flatAcrossReconnects},
				{"goroutines stay flat in N and a deletion reads nothing", flatInN},
			} {
				t.Run(tt.name, func(t *testing.T) {
					t.Parallel()
					testutil.OwnGoroutines(t, func(g testutil.Goroutines) { tt.run(t, mode, g) })
				})
			}
		})
	}
}

func statusFlip(t *testing.T, mode sd.WatchMode) {
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	r := register(t, provider, instance("pay", 9001), at)
	register(t, provider, instance("pay", 9002), at)
	in, ch := newInstancer(t, consumer, "pay", sd.WithWatchMode(mode), at)
	waitSet(t, ch, "127.0.0.1:9001", "127.0.0.1:9002")
	if got := in.Stats().WatchMode; got != mode {
		t.Fatalf("Stats().WatchMode = %v, want %v", got, mode)
	}
	for _, st := range []sd.Status{sd.StatusOutOfService, sd.StatusUp} {
		if err := r.SetStatus(context.Background(), st); err != nil {
			t.Fatal(err)
		}
		if st == sd.StatusUp {
			waitSet(t, ch, "127.0.0.1:9001", "127.0.0.1:9002")
		} else {
			waitSet(t, ch, "127.0.0.1:9002")
		}
	}
}

func unreadableChild(t *testing.T, mode sd.WatchMode) {
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	register(t, provider, instance("acl", 8101), at)
	owner := testutil.ZKConn(t, c.Addrs())
	if err := owner.AddAuth("digest", []byte("owner:pw")); err != nil {
		t.Fatal(err)
	}
	secret := base + "/acl/hidden"
	if _, err := owner.Create(secret, validNode(t, "acl", "hidden", 8102), 0, zk.DigestACL(zk.PermAll, "owner", "pw")); err != nil {
		t.Fatal(err)
	}
	in, err := sd.NewInstancerContext(ctxFor(t), consumer, "acl", sd.WithWatchMode(mode), at)
	if err != nil {
		t.Fatalf("the first load failed because of one unreadable node: %v", err)
	}
	t.Cleanup(in.Stop)
	if got := names(in.Instances()); len(got) != 1 || got[0] != "acl-8101" || in.Stats().Unreadable != 1 {
		t.Fatalf("instances %v, stats %+v", got, in.Stats())
	}
	// A change of the readable one is still seen.
	register(t, provider, instance("acl", 8103), at)
	testutil.WaitFor(t, "the new instance", func() bool { return len(in.Instances()) == 2 })
	// Readable again: the retry finds it (an ACL change notifies nobody).
	if _, err := owner.SetACL(secret, zk.WorldACL(zk.PermAll), -1); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the node read once readable", func() bool { return len(in.Instances()) == 3 })
}

func disconnectSticks(t *testing.T, mode sd.WatchMode) {
	c := zktest.New(t) // stops the server
	provider, consumer := newClient(t, c), newClient(t, c)
	register(t, provider, instance("dc", 8301))
	register(t, provider, instance("dc", 8302))
	in, ch := newInstancer(t, consumer, "dc", sd.TombstoneTTL(300*time.Millisecond), sd.WithWatchMode(mode))
	waitSet(t, ch, "127.0.0.1:8301", "127.0.0.1:8302")
	if err := c.StopAll(); err != nil {
		t.Fatal(err)
	}
	waitErr(t, ch, sd.ErrDisconnected)
	if _, ok := in.Evict("dc-8301"); !ok {
		t.Fatal("Evict found nothing")
	}
	for _, want := range []int{1, 2} { // evicted, then its tombstone expired
		if ev := next(t, ch); len(ev.Instances) != want || !errors.Is(ev.Err, sd.ErrDisconnected) {
			t.Fatalf("while disconnected: %v, err %v; want %d instances and ErrDisconnected", ev.Instances, ev.Err, want)
		}
	}
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch, "127.0.0.1:8301", "127.0.0.1:8302")
	if err := in.Err(); err != nil {
		t.Fatalf("Err() = %v after the re-read", err)
	}
}

// Issue 8, case 4: reconnects within a session add no goroutine and no
// client-side watcher.
func flatAcrossReconnects(t *testing.T, mode sd.WatchMode, goroutines testutil.Goroutines) {
	c := zktest.New(t)
	provider := newClient(t, c)
	for port := 8401; port < 8411; port++ {
		register(t, provider, instance("flat", port))
	}
	part := zktest.NewPartition()
	consumer := newClient(t, c, sd.Dialer(part.Dial), sd.SessionTimeout(4*time.Second))
	in, ch := newInstancer(t, consumer, "flat", sd.WithWatchMode(mode))
	testutil.WaitFor(t, "ten instances", func() bool { return len(in.Instances()) == 10 })
	reconnect := func() {
		part.Cut()
		waitErr(t, ch, sd.ErrDisconnected)
		part.Heal()
		testutil.WaitFor(t, "reconnected and re-read", func() bool { return in.Err() == nil && len(in.Instances()) == 10 })
	}
	reconnect()
	before := goroutines.Count()
	const rounds = 10
	for range rounds {
		reconnect()
	}
	// Changes made after the reconnects still arrive.
	register(t, provider, instance("flat", 8411))
	testutil.WaitFor(t, "the instance registered after the reconnects", func() bool { return len(in.Instances()) == 11 })
	if after := goroutines.Count(); after >= before+rounds/2 {
		t.Fatalf("goroutines grew from %d to %d over %d reconnects", before, after, rounds)
	}
}

func flatInN(t *testing.T, mode sd.WatchMode, goroutines testutil.Goroutines) {
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	const n = 100
	regs := make([]*sd.Registrar, n)
	for i := range n {
		regs[i] = register(t, provider, instance("many", 20000+i), at)
	}
	before := goroutines.Count()
	in, err := sd.NewInstancerContext(ctxFor(t), consumer, "many", sd.WithWatchMode(mode), at)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Stop)
	testutil.WaitFor(t, "every instance", func() bool { return len(in.Instances()) == n })
	if after := goroutines.Count(); after > before+10 {
		t.Fatalf("goroutines grew from %d to %d for %d instances", before, after, n)
	}
	reads, events := in.Stats().Fetches, in.Stats().WatchEvents
	if err := regs[0].DeregisterContext(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the deletion applied", func() bool { return len(in.Instances()) == n-1 })
	if s := in.Stats(); s.Fetches != reads || s.WatchEvents <= events {
		t.Fatalf("after a deletion: %d reads (was %d), %d events (was %d); want no read", s.Fetches, reads, s.WatchEvents, events)
	}
}

func reapedService(t *testing.T, mode sd.WatchMode) {
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	_, ch := newInstancer(t, consumer, "later", sd.WithWatchMode(mode), at)
	waitSet(t, ch)
	r := register(t, provider, instance("later", 3001), at)
	waitSet(t, ch, "127.0.0.1:3001")
	if err := r.DeregisterContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch)
	testutil.WaitFor(t, "the empty service node reaped", func() bool {
		ok, _, err := testutil.ZKConn(t, c.Addrs()).Exists(base + "/later")
		return err == nil && !ok
	})
	register(t, provider, instance("later", 3002), at)
	waitSet(t, ch, "127.0.0.1:3002")
}

// serverWatches is the server's zk_watch_count (mntr).
func serverWatches(t *testing.T, addr string) int {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("mntr")); err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	for line := range strings.Lines(sb.String()) {
		if v, ok := strings.CutPrefix(line, "zk_watch_count\t"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no zk_watch_count in %q", sb.String())
	return 0
}

// One recursive watch for a service of many instances, where per-node
// watches hold one per instance and one on the service; changes are applied
// from the notifications with one read each.
func TestRecursiveModeHoldsOneWatchPerService(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	consumer := newClient(t, c)
	// Nodes written by a bare connection, so that no Registrar's own watch
	// is counted.
	w := testutil.ZKConn(t, c.Addrs())
	acl := zk.WorldACL(zk.PermAll)
	for _, p := range []string{"/services", "/services/one"} {
		if _, err := w.Create(p, nil, 0, acl); err != nil {
			t.Fatal(err)
		}
	}
	add := func(port int) {
		id := fmt.Sprintf("one-%d", port)
		if _, err := w.Create("/services/one/"+id, validNode(t, "one", id, port), zk.FlagEphemeral, acl); err != nil {
			t.Fatal(err)
		}
	}
	const n = 40
	for i := range n {
		add(21000 + i)
	}
	addr := c.Servers[0].Addr()
	base := serverWatches(t, addr)
	in, err := sd.NewInstancerContext(ctxFor(t), consumer, "one", sd.WithWatchMode(sd.WatchRecursive))
	if err != nil {
		t.Fatal(err)
	}
	// The server files a recursive watch with its data and its child
	// watches (DataTree.addWatch), so mntr counts it twice.
	testutil.WaitFor(t, "one watch on the server", func() bool { return serverWatches(t, addr) == base+2 })
	if s := in.Stats(); s.WatchMode != sd.WatchRecursive || s.BulkReads != n || s.Fetches != n {
		t.Fatalf("stats %+v, want the recursive mode and one bulk read of %d", s, n)
	}
	add(22000)
	testutil.WaitFor(t, "the new one", func() bool { return len(in.Instances()) == n+1 })
	if s := in.Stats(); s.Fetches != n+1 {
		t.Fatalf("%d reads after one creation, want %d", s.Fetches, n+1)
	}
	in.Stop()
	testutil.WaitFor(t, "the watch gone with its session", func() bool { return serverWatches(t, addr) == base })

	per, err := sd.NewInstancerContext(ctxFor(t), consumer, "one", sd.WithWatchMode(sd.WatchPerNode))
	if err != nil {
		t.Fatal(err)
	}
	defer per.Stop()
	testutil.WaitFor(t, "a watch per node", func() bool { return serverWatches(t, addr) >= base+n+1 })
	t.Logf("watches for %d instances in mntr: recursive 2 (one watch), per-node %d", n+1, serverWatches(t, addr)-base)
}

// refusingDial makes the server refuse addWatch as a 3.5 server does: the
// request goes out under an opcode the server does not know, and the real
// server answers UNIMPLEMENTED.
func refusingDial(network, address string, timeout time.Duration) (net.Conn, error) {
	conn, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return refusingConn{conn}, nil
}

// opOffsets are where the opcodes of the whole request frames in p are
// (length, xid, op); the watch session writes whole frames, several at a
// time.
func opOffsets(p []byte) []int {
	var at []int
	for off := 0; len(p)-off >= 12; {
		n := 4 + int(binary.BigEndian.Uint32(p[off:]))
		if n > len(p)-off {
			break
		}
		at = append(at, off+8)
		off += n
	}
	return at
}

type refusingConn struct{ net.Conn }

// Write renames addWatch in every whole request frame of p.
func (c refusingConn) Write(p []byte) (int, error) {
	var q []byte
	for _, at := range opOffsets(p) {
		if binary.BigEndian.Uint32(p[at:]) == 106 {
			if q == nil {
				q = append([]byte(nil), p...)
			}
			binary.BigEndian.PutUint32(q[at:], 9999)
		}
	}
	if q != nil {
		return c.Conn.Write(q)
	}
	return c.Conn.Write(p)
}

// opsConn records the opcodes of each Write's whole request frames.
type opsConn struct {
	net.Conn
	mu     *sync.Mutex
	writes *[][]uint32
}

func (c opsConn) Write(p []byte) (int, error) {
	var ops []uint32
	for _, at := range opOffsets(p) {
		ops = append(ops, binary.BigEndian.Uint32(p[at:]))
	}
	c.mu.Lock()
	*c.writes = append(*c.writes, ops)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// An Instancer's first load sends its listing in the same write as
// addWatch, whichever of its goroutines runs first: a listing sent after
// the watch's reply would cost the load a round trip.
func TestTheFirstListingGoesOutWithAddWatch(t *testing.T) {
	t.Parallel()
	// A consumer alone never opens the client's own session: only the watch session writes.
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	register(t, newClient(t, c), instance("piped", 7201), at)
	for range 20 {
		var mu sync.Mutex
		var writes [][]uint32
		dial := func(network, address string, timeout time.Duration) (net.Conn, error) {
			conn, err := net.DialTimeout(network, address, timeout)
			if err != nil {
				return nil, err
			}
			return opsConn{conn, &mu, &writes}, nil
		}
		cl, err := sd.NewClient(c.ConnectString(), sd.SessionTimeout(2*time.Second), sd.Dialer(dial))
		if err != nil {
			t.Fatal(err)
		}
		in, err := sd.NewInstancerContext(ctxFor(t), cl, "piped", sd.WithWatchMode(sd.WatchRecursive), at)
		if err != nil {
			t.Fatal(err)
		}
		in.Stop()
		cl.Close()
		mu.Lock()
		var first []uint32 // the first write of requests after the handshake
		for _, ops := range writes {
			if len(ops) > 0 && ops[0] != 0 && ops[0] != 11 { // not the handshake, nor a ping
				first = ops
				break
			}
		}
		mu.Unlock()
		if len(first) != 2 || first[0] != 106 || first[1] != 8 {
			t.Fatalf("the first requests went out as %v, want addWatch (106) and getChildren (8) together", first)
		}
	}
}

func TestRefusedAddWatchFallsBackToPerNode(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider := newClient(t, c)
	consumer := newClient(t, c, sd.Dialer(refusingDial))
	r := register(t, provider, instance("old", 7101), at)
	in, ch := newInstancer(t, consumer, "old", sd.WithWatchMode(sd.WatchRecursive), at)
	waitSet(t, ch, "127.0.0.1:7101")
	testutil.WaitFor(t, "the per-node mode", func() bool { return in.Stats().WatchMode == sd.WatchPerNode })
	if err := r.SetStatus(context.Background(), sd.StatusOutOfService); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch)
	register(t, provider, instance("old", 7102), at)
	waitSet(t, ch, "127.0.0.1:7102")
}

// Notifications of one node's quick changes are applied in the stream's
// order: whatever the interleaving of reads and events, the set ends as
// ZooKeeper does.
func TestRecursiveModeConvergesUnderChurn(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	_, ch := newInstancer(t, consumer, "churn", sd.WithWatchMode(sd.WatchRecursive), at)
	waitSet(t, ch)
	regs := make([]*sd.Registrar, 5)
	out := make([]bool, len(regs))
	for i := range regs {
		regs[i] = register(t, provider, instance("churn", 23000+i), at)
	}
	for round := range 20 {
		r := regs[round%len(regs)]
		if err := r.DeregisterContext(ctxFor(t)); err != nil {
			t.Fatal(err)
		}
		if err := r.RegisterContext(ctxFor(t)); err != nil {
			t.Fatal(err)
		}
		st := sd.StatusUp
		if out[round%len(regs)] = round%3 == 0; out[round%len(regs)] {
			st = sd.StatusOutOfService
		}
		if err := r.SetStatus(ctxFor(t), st); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{}
	for i := range regs {
		if !out[i] {
			want = append(want, fmt.Sprintf("127.0.0.1:%d", 23000+i))
		}
	}
	waitSet(t, ch, want...)
}

// twiceConn lists the first child of every getChildren reply a second
// time, at the end, as only a broken server would.
type twiceConn struct {
	*frameReader
	mu      sync.Mutex
	lists   map[int32]bool // xids of the getChildren requests sent
	doubled *atomic.Int32
}

func newTwiceConn(nc net.Conn, doubled *atomic.Int32) *twiceConn {
	c := &twiceConn{lists: map[int32]bool{}, doubled: doubled}
	c.frameReader = &frameReader{Conn: nc, edit: c.double}
	return c
}

func (c *twiceConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	for _, at := range opOffsets(p) {
		if binary.BigEndian.Uint32(p[at:]) == 8 { // getChildren
			c.lists[int32(binary.BigEndian.Uint32(p[at-4:]))] = true
		}
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// double appends the first name again to a getChildren reply: after its
// ReplyHeader{xid, zxid, err}, a count, then each name with its length.
func (c *twiceConn) double(frame []byte) []byte {
	c.mu.Lock()
	list := c.lists[int32(binary.BigEndian.Uint32(frame[4:8]))]
	c.mu.Unlock()
	if !list || len(frame) < 28 || binary.BigEndian.Uint32(frame[16:20]) != 0 {
		return frame
	}
	count := binary.BigEndian.Uint32(frame[20:24])
	if count == 0 {
		return frame
	}
	n := binary.BigEndian.Uint32(frame[24:28])
	frame = append(frame, frame[24:28+n]...)
	binary.BigEndian.PutUint32(frame[20:], count+1)
	binary.BigEndian.PutUint32(frame[0:], uint32(len(frame)-4))
	c.doubled.Add(1)
	return frame
}

// A listing that names a child twice (a broken server's) still publishes
// each instance once: a first load uses the order of what it decoded only
// when every child it stored was a different one.
func TestAChildListedTwiceIsPublishedOnce(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	conn := testutil.ZKConn(t, c.Addrs())
	for _, p := range []string{base, base + "/twice"} {
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	const n = 5
	for i := range n {
		id := fmt.Sprintf("inst-%d", i)
		if _, err := conn.Create(base+"/twice/"+id, validNode(t, "twice", id, 9100+i), 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	var doubled atomic.Int32
	dial := func(network, address string, timeout time.Duration) (net.Conn, error) {
		nc, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return newTwiceConn(nc, &doubled), nil
	}
	cl := newClient(t, c, sd.Dialer(dial))
	_, ch := newInstancer(t, cl, "twice", sd.WithWatchMode(sd.WatchRecursive), sd.BasePath(base))
	var ev kitsd.Event
	testutil.WaitFor(t, "a complete first set", func() bool {
		select {
		case ev = <-ch:
		default:
		}
		return ev.Err == nil && len(ev.Instances) >= n
	})
	if doubled.Load() == 0 {
		t.Fatal("no listing was doubled: the test proves nothing")
	}
	seen := map[string]bool{}
	for _, s := range ev.Instances {
		if seen[s] {
			t.Fatalf("%s published twice: %v", s, ev.Instances)
		}
		seen[s] = true
	}
	if len(ev.Instances) != n {
		t.Fatalf("published %v, want %d instances", ev.Instances, n)
	}
}
