package sd_test

import (
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	kitsd "github.com/go-kit/kit/sd"
	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// A consumer that heard of a deletion only by its notification, which
// carries no zxid (ZOOKEEPER-4655), and read nothing since, still never
// takes the deleted instance back from a server behind the deletion: a
// ping's reply moves the zxid its next handshake sends past the deletion,
// so that server refuses it. The copy is taken after the consumer's load,
// so nothing the consumer read is past the copy: before pings counted,
// the recursive mode republished the deleted instance from it (the
// per-node one re-arms its child watch with a read, which tells it).
func TestADeletionHeardOnlyByItsNotificationFencesAServerBehindIt(t *testing.T) {
	t.Parallel()
	a := zktest.New(t)
	w := testutil.ZKConn(t, a.Addrs())
	for _, p := range []string{"/services", "/services/sdel"} {
		if _, err := w.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	gone := instance("sdel", 7501)
	createNode(t, w, gone)
	createNode(t, w, instance("sdel", 7502))

	// B, a copy of A's data taken after the consumer's load and before the
	// deletion, is in the consumer's connect string from the start at an
	// address that refuses until B runs there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bSlot := ln.Addr().String()
	ln.Close()
	var bAddr atomic.Pointer[string]
	var toB atomic.Int32
	dial := func(network, address string, timeout time.Duration) (net.Conn, error) {
		if address == bSlot {
			p := bAddr.Load()
			if p == nil {
				return nil, fmt.Errorf("dial %s: B is not running yet", address)
			}
			toB.Add(1)
			address = *p
		}
		return net.DialTimeout(network, address, timeout)
	}
	// The four tries of B fit in one session (one with no server for its
	// timeout is lost, and starts anew from zxid 0): go-zookeeper tries a
	// round of the servers a second, and a loaded machine's SIGTERM and
	// dials take seconds more.
	const session = 12 * time.Second
	cl, err := sd.NewClient(a.Servers[0].Addr()+","+bSlot, sd.SessionTimeout(session), sd.Dialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	in, err := sd.NewInstancer(cl, "sdel")
	if err != nil {
		t.Fatal(err)
	}
	log := collect(t, in)
	log.waitFor(t, "127.0.0.1:7501", "127.0.0.1:7502")
	b := a.CopyOf(t, a.Servers[0])

	if err := w.Delete("/services/sdel/"+gone.ID, -1); err != nil {
		t.Fatal(err)
	}
	log.waitFor(t, "127.0.0.1:7502")
	_, deletedAt := log.since(0)
	// A lead past the copy's own writes when it starts (its sessions'
	// expiries), on paths the consumer does not watch: it hears nothing
	// of them, and only a ping can tell it.
	var lead int64
	for i := range 10 {
		p := fmt.Sprintf("/filler-sdel-%d", i)
		if _, err := w.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		_, st, err := w.Exists(p)
		if err != nil {
			t.Fatal(err)
		}
		lead = st.Czxid
	}
	// Its pings (every third of the session) tell it; without them it
	// would wait for ever, so the wait ends after two pings either way and
	// the server behind is the judge.
	ledAt := time.Now()
	testutil.WaitFor(t, "the consumer's zxid past the deletion, or two pings", func() bool {
		return sd.SeenZxid(cl) >= lead || time.Since(ledAt) > 2*session/3
	})

	if err := b.StartAll(); err != nil {
		t.Fatal(err)
	}
	addr := b.Servers[0].Addr()
	bAddr.Store(&addr)
	republished := func() (kitsd.Event, bool) {
		evs, _ := log.since(deletedAt)
		i := slices.IndexFunc(evs, func(ev kitsd.Event) bool { return slices.Contains(ev.Instances, "127.0.0.1:7501") })
		if i < 0 {
			return kitsd.Event{}, false
		}
		return evs[i], true
	}
	// Only B is up now: the consumer's sessions go to it, again and again.
	if err := a.Servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	from := toB.Load()
	testutil.WaitFor(t, "four tries of the server behind", func() bool {
		_, again := republished()
		return toB.Load() >= from+4 || again
	})
	if ev, again := republished(); again {
		t.Fatalf("the deleted instance was published again from the server behind its deletion (%d dials to it): %v (err %v)", toB.Load()-from, ev.Instances, ev.Err)
	}
}
