package sd_test

import (
	"sync"
	"testing"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// sessionLog records a Client's session events.
type sessionLog struct {
	mu  sync.Mutex
	evs []sd.SessionEvent
}

func (l *sessionLog) add(ev sd.SessionEvent) {
	l.mu.Lock()
	l.evs = append(l.evs, ev)
	l.mu.Unlock()
}

// since reports whether an event in state s came after the first n.
func (l *sessionLog) since(n int, s sd.State) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.evs[min(n, len(l.evs)):] {
		if ev.State == s {
			return true
		}
	}
	return false
}

func (l *sessionLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.evs)
}

// Issue 32, item 6: a Client that only watches (in the recursive mode, over
// its watch session alone) reports that session in State, Connected and
// OnSessionEvent, through a server stop and restart; in the per-node mode
// the same holds of its own session. Readiness wired to Connected is true
// when the consumer can hear changes and false when it cannot.
func TestAWatchOnlyClientReportsItsConnection(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	register(t, newClient(t, c), instance("state", 8501))
	var log sessionLog
	consumer := newClient(t, c, sd.OnSessionEvent(log.add))
	if consumer.Connected() {
		t.Fatal("Connected before anything asked for a session")
	}
	_, ch := newInstancer(t, consumer, "state")
	waitSet(t, ch, "127.0.0.1:8501")

	testutil.WaitFor(t, "Connected once the Instancer loaded", consumer.Connected)
	if got := consumer.State(); got != sd.StateHasSession {
		t.Fatalf("State = %v with the Instancer loaded, want %v", got, sd.StateHasSession)
	}
	testutil.WaitFor(t, "a has-session event", func() bool { return log.since(0, sd.StateHasSession) })
	if consumer.SessionID() == 0 && consumer.WatchSessionID() == 0 {
		t.Fatal("no session id: neither SessionID nor WatchSessionID is set while connected")
	}

	mark := log.len()
	if err := c.StopAll(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "not Connected with the server stopped", func() bool { return !consumer.Connected() })
	if got := consumer.State(); got == sd.StateHasSession {
		t.Fatalf("State = %v with the server stopped", got)
	}
	testutil.WaitFor(t, "a disconnected event", func() bool { return log.since(mark, sd.StateDisconnected) })

	mark = log.len()
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "Connected after the restart", consumer.Connected)
	testutil.WaitFor(t, "a has-session event after the restart", func() bool { return log.since(mark, sd.StateHasSession) })
}

// The events of the watch session say so, and carry its id.
func TestWatchSessionEventsAreMarked(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	register(t, newClient(t, c), instance("marked", 8511), at)
	var log sessionLog
	consumer := newClient(t, c, sd.OnSessionEvent(log.add))
	_, ch := newInstancer(t, consumer, "marked", recursive, at)
	waitSet(t, ch, "127.0.0.1:8511")
	testutil.WaitFor(t, "a watch session event", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		for _, ev := range log.evs {
			if ev.Watch && ev.State == sd.StateHasSession && ev.SessionID == consumer.WatchSessionID() && ev.SessionID != 0 {
				return true
			}
		}
		return false
	})
	if sd.OwnSessionDialled(consumer) {
		t.Fatal("a watch-only consumer dialled its own session")
	}
	if consumer.SessionID() != 0 {
		t.Fatalf("SessionID = %#x for a Client that never dialled its own session", consumer.SessionID())
	}
}
