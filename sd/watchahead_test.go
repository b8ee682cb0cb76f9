package sd_test

import (
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// sessions lists the sessions connected to the standalone server c.
func sessions(t *testing.T, c *zktest.Cluster) []int64 {
	t.Helper()
	ids, err := c.Servers[0].Sessions()
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// The first Instancer's watch session is the one NewClient opened beside
// its own, not a third: the load waits for no handshake of its own.
func TestTheFirstInstancerTakesTheWatchSessionOpenedAhead(t *testing.T) {
	c := zktest.New(t)
	provider := newClient(t, c, sd.WatchSessionAhead(false))
	register(t, provider, instance("pay", 9001))
	before := sessions(t, c)

	consumer := newClient(t, c)
	testutil.WaitFor(t, "the watch session ahead dialled", func() bool { return sd.AheadDone(consumer) })
	ahead, _ := sd.AheadSession(consumer)
	if ahead == 0 || ahead == consumer.SessionID() {
		t.Fatalf("ahead session %#x, client session %#x: want a session of its own", ahead, consumer.SessionID())
	}
	_, ch := newInstancer(t, consumer, "pay", sd.WithWatchMode(sd.WatchRecursive))
	waitSet(t, ch, "127.0.0.1:9001")
	if _, taken := sd.AheadSession(consumer); !taken {
		t.Fatal("the Instancer did not take the watch session opened ahead")
	}
	// Wanted once the load is done.
	testutil.WaitFor(t, "the consumer's own session", func() bool { return consumer.SessionID() != 0 })
	var added []int64
	for _, id := range sessions(t, c) {
		if !slices.Contains(before, id) {
			added = append(added, id)
		}
	}
	slices.Sort(added)
	want := []int64{consumer.SessionID(), ahead}
	slices.Sort(want)
	if !slices.Equal(added, want) {
		t.Fatalf("sessions the consumer added: %#x, want its own and the one ahead %#x", added, want)
	}
}

// A watch session ahead that nothing takes is closed on the server, and
// WatchSessionAhead(false) opens none.
func TestAWatchSessionAheadNobodyTakesIsClosed(t *testing.T) {
	defer sd.SetWatchAheadIdle(300 * time.Millisecond)()
	c := zktest.New(t)
	cl := newClient(t, c)
	testutil.WaitFor(t, "the watch session ahead dialled", func() bool { return sd.AheadDone(cl) })
	ahead, _ := sd.AheadSession(cl)
	if ahead == 0 {
		t.Fatal("no session ahead")
	}
	testutil.WaitFor(t, "the untaken session ahead closed on the server", func() bool {
		return !slices.Contains(sessions(t, c), ahead)
	})
	testutil.WaitFor(t, "the client's own session", func() bool { return cl.SessionID() != 0 }) // within zkGrace
	if !slices.Contains(sessions(t, c), cl.SessionID()) {
		t.Fatal("the client's own session went too")
	}
	// A later Instancer dials its own and loads.
	register(t, cl, instance("pay", 9001))
	_, ch := newInstancer(t, cl, "pay")
	waitSet(t, ch, "127.0.0.1:9001")

	before := sessions(t, c)
	off := newClient(t, c, sd.WatchSessionAhead(false))
	time.Sleep(100 * time.Millisecond) // a session ahead would have dialled by now
	for _, id := range sessions(t, c) {
		if !slices.Contains(before, id) && id != off.SessionID() {
			t.Fatalf("WatchSessionAhead(false): session %#x appeared beside the client's own %#x", id, off.SessionID())
		}
	}
	if id, _ := sd.AheadSession(off); id != 0 {
		t.Fatalf("WatchSessionAhead(false) opened session %#x", id)
	}
}

// When the server the session ahead dialled refuses it, the Instancer
// dials on its own and loads.
func TestADeadServerAheadStillLoads(t *testing.T) {
	c := zktest.New(t)
	dead := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	provider := newClient(t, c, sd.WatchSessionAhead(false))
	register(t, provider, instance("pay", 9001))
	// The host order is shuffled: try until the first pick is the dead one.
	for try := 0; ; try++ {
		if try == 40 {
			t.Fatal("the dead server was never dialled first")
		}
		cl, err := sd.NewClient(dead+","+c.Servers[0].Addr(), sd.SessionTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "the watch session ahead dialled", func() bool { return sd.AheadDone(cl) })
		if id, _ := sd.AheadSession(cl); id != 0 {
			cl.Close()
			continue
		}
		in, err := sd.NewInstancer(cl, "pay", sd.WithWatchMode(sd.WatchRecursive))
		if err != nil {
			t.Fatal(err)
		}
		if got := in.Instances(); len(got) != 1 || got[0].Port != 9001 {
			t.Errorf("loaded %v, want pay:9001", got)
		}
		in.Stop()
		cl.Close()
		return
	}
}

// A consumer's first load runs on the watch session alone: NewClient
// returns with it, and the load does not dial the Client's own session
// either. A Registrar's call needs that session and has it dialled at
// once, on a consumer as on a fresh client.
func TestAConsumerLoadsOnTheWatchSessionAlone(t *testing.T) {
	defer sd.SetZKGrace(time.Hour)()
	c := zktest.New(t)
	provider := newClient(t, c, sd.WatchSessionAhead(false))
	register(t, provider, instance("pay", 9001))
	before := sessions(t, c)
	added := func() (ids []int64) {
		for _, id := range sessions(t, c) {
			if !slices.Contains(before, id) {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		return ids
	}

	consumer := newClient(t, c)
	ahead, _ := sd.AheadSession(consumer)
	if ahead == 0 {
		t.Fatal("NewClient returned without the watch session")
	}
	if id, st := consumer.SessionID(), consumer.State(); id != 0 || st == sd.StateHasSession {
		t.Fatalf("the client's own session was dialled before anything needed it: %#x, %v", id, st)
	}
	if got := added(); !slices.Equal(got, []int64{ahead}) {
		t.Fatalf("sessions the consumer added before its load: %#x, want only the watch session %#x", got, ahead)
	}
	// A per-node Instancer (the suite's other mode) needs the own session.
	_, ch := newInstancer(t, consumer, "pay", sd.WithWatchMode(sd.WatchRecursive))
	waitSet(t, ch, "127.0.0.1:9001")
	// The load done, its own session still waits: for a call, or zkGrace.
	time.Sleep(300 * time.Millisecond)
	if id := consumer.SessionID(); id != 0 {
		t.Fatalf("the consumer's own session %#x was dialled by its load", id)
	}
	if got := added(); !slices.Equal(got, []int64{ahead}) {
		t.Fatalf("sessions the consumer added by its load: %#x, want only the watch session %#x", got, ahead)
	}

	// Without the call's wish, these would wait for zkGrace: an hour.
	for i, cl := range []*sd.Client{consumer, newClient(t, c)} {
		r := register(t, cl, instance("pay", 9002+i))
		_, st, err := testutil.ZKConn(t, c.Addrs()).Get(r.Path())
		if err != nil {
			t.Fatal(err)
		}
		if st.EphemeralOwner == 0 || st.EphemeralOwner != cl.SessionID() {
			t.Fatalf("node owned by %#x, want the client's own session %#x", st.EphemeralOwner, cl.SessionID())
		}
	}
}

// A Client closed before anything needed its own session never dials it:
// no session of it is left on the server, nor appears after Close.
func TestCloseBeforeTheOwnSessionDialsNone(t *testing.T) {
	defer sd.SetZKGrace(time.Hour)()
	c := zktest.New(t)
	before := sessions(t, c)
	var had atomic.Bool
	cl, err := sd.NewClient(c.ConnectString(), sd.SessionTimeout(2*time.Second),
		sd.OnSessionEvent(func(ev sd.SessionEvent) {
			if ev.State == sd.StateHasSession {
				had.Store(true)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()
	cl.Close()
	if had.Load() {
		t.Fatal("the client's own session was created, at Close")
	}
	left := func() (ids []int64) {
		for _, id := range sessions(t, c) {
			if !slices.Contains(before, id) {
				ids = append(ids, id)
			}
		}
		return ids
	}
	testutil.WaitFor(t, "the watch session closed on the server", func() bool { return len(left()) == 0 })
	time.Sleep(300 * time.Millisecond) // a dial after Close would show by now
	if ids := left(); len(ids) != 0 {
		t.Fatalf("sessions after Close: %#x", ids)
	}
	if had.Load() {
		t.Fatal("the client's own session was created after Close")
	}
	if st := cl.State(); st == sd.StateHasSession {
		t.Fatalf("a closed client reports %v", st)
	}
}
