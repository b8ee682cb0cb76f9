package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// lines is an io.Writer that a test reads while watch writes.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// watching runs watch in the background until the test ends or stop is
// called; stop returns its exit status.
type watching struct {
	out, errs lines
	cancel    context.CancelFunc
	done      chan int
}

func startWatch(t *testing.T, args ...string) *watching {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watching{cancel: cancel, done: make(chan int, 1)}
	go func() { w.done <- run(ctx, append([]string{"watch"}, args...), &w.out, &w.errs) }()
	t.Cleanup(func() { w.stop(t) })
	return w
}

func (w *watching) stop(t *testing.T) int {
	t.Helper()
	w.cancel()
	select {
	case code := <-w.done:
		w.done <- code
		return code
	case <-time.After(testutil.WaitLimit):
		t.Fatal("watch did not return after its ctx ended")
		return -1
	}
}

// wait waits for a JSON line for which match holds and returns it.
func (w *watching) wait(t *testing.T, what string, match func(watchEvent) bool) watchEvent {
	t.Helper()
	var found watchEvent
	testutil.WaitFor(t, what, func() bool {
		for _, l := range w.out.all() {
			var ev watchEvent
			if json.Unmarshal([]byte(l), &ev) == nil && match(ev) {
				found = ev
				return true
			}
		}
		select {
		case code := <-w.done:
			w.done <- code
			t.Fatalf("watch ended with %d before %s: %s\n%s", code, what, strings.Join(w.out.all(), "\n"), strings.Join(w.errs.all(), "\n"))
		default:
		}
		return false
	})
	return found
}

func is(kind, id string) func(watchEvent) bool {
	return func(ev watchEvent) bool { return ev.Event == kind && ev.ID == id }
}

func TestWatchPrintsChangesLive(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	base := basePath("watch-live")
	cl := newClient(t, c)
	a := register(t, cl, base, sd.Instance{Name: "quote", ID: "a", Address: "127.0.0.1", Port: 8081})

	w := startWatch(t, on(c, base, "quote", "-o", "json")...)
	if ev := w.wait(t, "a present", is(evPresent, "a")); ev.Status != "UP" || ev.Port != 8081 || ev.Owner != hex(cl.SessionID()) {
		t.Fatalf("present: %+v", ev)
	}
	if ev := w.wait(t, "watching", is(evWatching, "")); *ev.Instances != 1 || ev.Path != base+"/quote" {
		t.Fatalf("watching: %+v", ev)
	}

	b := register(t, cl, base, sd.Instance{Name: "quote", ID: "b", Address: "127.0.0.1", Port: 8082})
	w.wait(t, "b added", func(ev watchEvent) bool {
		return is(evAdded, "b")(ev) && ev.Status == "UP" && ev.Address == "127.0.0.1"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.SetStatus(ctx, sd.StatusOutOfService); err != nil {
		t.Fatal(err)
	}
	w.wait(t, "b out of service", func(ev watchEvent) bool {
		return is(evStatus, "b")(ev) && ev.OldStatus == "UP" && ev.Status == "OUT_OF_SERVICE"
	})
	if err := b.SetStatus(ctx, sd.StatusUp); err != nil {
		t.Fatal(err)
	}
	w.wait(t, "b up again", func(ev watchEvent) bool { return is(evStatus, "b")(ev) && ev.OldStatus == "OUT_OF_SERVICE" })
	if err := a.DeregisterContext(ctx); err != nil {
		t.Fatal(err)
	}
	w.wait(t, "a removed", is(evRemoved, "a"))

	conn := rawConn(t, c, false)
	p := base + "/quote/junk"
	if _, err := conn.Create(p, []byte("not json"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	w.wait(t, "junk added as malformed", func(ev watchEvent) bool {
		return is(evAdded, "junk")(ev) && ev.Status == statusMalformed && ev.Error != ""
	})
	if _, err := conn.Set(p, curatorJSON(t, "quote", "junk", "127.0.0.1", 8083), -1); err != nil {
		t.Fatal(err)
	}
	w.wait(t, "junk fixed", func(ev watchEvent) bool {
		return is(evStatus, "junk")(ev) && ev.OldStatus == statusMalformed && ev.Status == "UP"
	})
	if _, err := conn.Set(p, curatorJSON(t, "quote", "junk", "127.0.0.1", 8084), -1); err != nil {
		t.Fatal(err)
	}
	w.wait(t, "junk moved", func(ev watchEvent) bool { return is(evChanged, "junk")(ev) && ev.Port == 8084 })

	if code := w.stop(t); code != exitOK {
		t.Fatalf("exit %d: %s", code, w.errs.all())
	}
	// One line per change: nothing was reported twice.
	seen := map[string]int{}
	for _, l := range w.out.all() {
		var ev watchEvent
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("not a JSON line: %q", l)
		}
		if ev.Time.IsZero() {
			t.Fatalf("no time: %q", l)
		}
		seen[ev.Event+" "+ev.ID+" "+ev.Status]++
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("%q reported %d times", k, n)
		}
	}
}

// With -wait, a service that does not exist yet (a provider about to
// start; Curator's parents come and go with their instances) is watched
// until it appears.
func TestWatchWaitsForAServiceToAppearAndPrintsText(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	base := basePath("watch-text")
	var out, errs lines
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- run(ctx, on(c, base, "watch", "fresh", "-wait"), &out, &errs) }()
	testutil.WaitFor(t, "the watching line", func() bool {
		l := out.all()
		return len(l) > 0 && strings.Contains(l[0], "watching") && strings.Contains(l[0], "0 instances")
	})
	cl := newClient(t, c)
	register(t, cl, base, sd.Instance{Name: "fresh", ID: "x", Address: "127.0.0.1", Port: 9001})
	testutil.WaitFor(t, "the added line", func() bool {
		for _, l := range out.all() {
			if strings.Contains(l, "added") && strings.Contains(l, "fresh/x  127.0.0.1:9001  UP") {
				return true
			}
		}
		return false
	})
	cancel() // SIGINT, in main
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, errs.all())
		}
	case <-time.After(testutil.WaitLimit):
		t.Fatal("watch did not end with its ctx")
	}
	if _, err := time.Parse("2006-01-02T15:04:05.000Z07:00", strings.Fields(out.all()[0])[0]); err != nil {
		t.Fatalf("a line starts with its time: %v", err)
	}
}

func TestWatchForEndsOnItsOwn(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	done := make(chan int, 1)
	var out, errs lines
	go func() {
		done <- run(context.Background(), on(c, basePath("watch-for"), "watch", "quote", "-wait", "-for", "300ms"), &out, &errs)
	}()
	select {
	case code := <-done:
		if code != exitOK || len(out.all()) != 1 {
			t.Fatalf("exit %d, output %q, %q", code, out.all(), errs.all())
		}
	case <-time.After(testutil.WaitLimit):
		t.Fatal("watch -for 300ms did not end")
	}
}

// After its session expires, watch says so, reads the service again in
// its new session, and goes on reporting changes.
func TestWatchGoesOnAfterItsSessionExpired(t *testing.T) {
	c := zkServer(t)
	base := basePath("watch-expiry")
	rec := zktest.NewSessionRecorder()
	dialer = rec.Dial
	t.Cleanup(func() { dialer = defaultDialer })
	cl := newClient(t, c)
	register(t, cl, base, sd.Instance{Name: "quote", ID: "a", Address: "127.0.0.1", Port: 8081})

	w := startWatch(t, on(c, base, "quote", "-o", "json", "-timeout", "2s")...)
	w.wait(t, "watching", is(evWatching, ""))
	if err := rec.Expire(c.Addrs()[0], rec.LastSession()); err != nil {
		t.Fatal(err)
	}
	w.wait(t, "expired", is(evExpired, ""))
	if ev := w.wait(t, "connected", is(evConnected, "")); *ev.Instances != 1 {
		t.Fatalf("connected: %+v", ev)
	}
	register(t, cl, base, sd.Instance{Name: "quote", ID: "b", Address: "127.0.0.1", Port: 8082})
	w.wait(t, "b added in the new session", is(evAdded, "b"))
	if code := w.stop(t); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	// Issue 22: one "connected" for the one reconnect.
	n := 0
	for _, l := range w.out.all() {
		var ev watchEvent
		if json.Unmarshal([]byte(l), &ev) == nil && ev.Event == evConnected {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d connected lines after one expiry, want 1:\n%s", n, strings.Join(w.out.all(), "\n"))
	}
}

// A connection lost within the session: watch says so, reads again on the
// new connection (a change made meanwhile included), and goes on: its
// watches were re-sent through the zxid fence, with no settle wait.
func TestWatchGoesOnAfterALostConnection(t *testing.T) {
	c := zkServer(t)
	base := basePath("watch-reconnect")
	var (
		mu   sync.Mutex
		last net.Conn
		hold = make(chan struct{})
		held atomic.Bool
	)
	dialer = func(network, address string, timeout time.Duration) (net.Conn, error) {
		if held.Load() {
			<-hold
		}
		conn, err := net.DialTimeout(network, address, timeout)
		if err == nil {
			mu.Lock()
			last = conn
			mu.Unlock()
		}
		return conn, err
	}
	t.Cleanup(func() { dialer = defaultDialer })
	cl := newClient(t, c)
	register(t, cl, base, sd.Instance{Name: "quote", ID: "a", Address: "127.0.0.1", Port: 8081})

	w := startWatch(t, on(c, base, "quote", "-o", "json", "-timeout", "10s")...)
	w.wait(t, "watching", is(evWatching, ""))
	held.Store(true)
	mu.Lock()
	_ = last.Close()
	mu.Unlock()
	w.wait(t, "disconnected", is(evDisconnected, ""))
	register(t, cl, base, sd.Instance{Name: "quote", ID: "b", Address: "127.0.0.1", Port: 8082})
	held.Store(false)
	close(hold)
	// Read again on the new connection: b is counted.
	if ev := w.wait(t, "connected", is(evConnected, "")); ev.Instances == nil || *ev.Instances != 2 {
		t.Fatalf("connected: %+v, want the 2 instances read again", ev)
	}
	w.wait(t, "b, registered while disconnected", is(evAdded, "b"))
	register(t, cl, base, sd.Instance{Name: "quote", ID: "c", Address: "127.0.0.1", Port: 8083})
	w.wait(t, "c, registered after the reconnect", is(evAdded, "c"))
	if code := w.stop(t); code != exitOK {
		t.Fatalf("exit %d", code)
	}
}
