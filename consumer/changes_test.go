package consumer

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	kitsd "github.com/go-kit/kit/sd"

	"github.com/gracekit/gracekit/internal/testutil"
)

// pushInstancer is a kitsd.Instancer whose sets the test sends.
type pushInstancer struct {
	mu sync.Mutex
	ch chan<- kitsd.Event
}

func (p *pushInstancer) Register(ch chan<- kitsd.Event) { p.mu.Lock(); p.ch = ch; p.mu.Unlock() }
func (p *pushInstancer) Deregister(chan<- kitsd.Event)  { p.mu.Lock(); p.ch = nil; p.mu.Unlock() }
func (p *pushInstancer) Stop()                          {}

func (p *pushInstancer) send(set ...string) {
	p.mu.Lock()
	ch := p.ch
	p.mu.Unlock()
	ch <- kitsd.Event{Instances: set}
}

// Issue 39, item 6: a consumer says when a service's instances come and
// go, one info line per change with the count and what was added and
// removed, at most one line per interval: the changes within one are
// folded into the next line, which counts them. A set sent again (an
// error on the same set) is no change.
func TestChangeLogSaysEachChangeOnceAndFoldsBursts(t *testing.T) {
	const interval = 300 * time.Millisecond
	logs, log := testutil.NewLogs()
	src := &pushInstancer{}
	w := startChangeLog(src, log.With("service", "quote"), interval)
	defer w.stop()

	lines := func(n int) []testutil.Log {
		t.Helper()
		testutil.WaitFor(t, fmt.Sprintf("%d lines", n), func() bool { return len(logs.Messages("instances changed")) >= n })
		return logs.Messages("instances changed")
	}
	src.send() // the first load: an empty service
	src.send("a:1")
	src.send("a:1", "b:1")
	src.send("a:1", "b:1") // the same set: no change
	src.send("b:1", "c:1")
	got := lines(2)
	want := []map[string]string{
		{"service": "quote", "count": "0", "added": "", "removed": ""},
		{"service": "quote", "count": "2", "added": "b:1,c:1", "removed": "", "changes": "3"},
	}
	for i, w := range want {
		for k, v := range w {
			if got[i].Attrs[k] != v {
				t.Errorf("line %d: %s=%q, want %q\n%s", i+1, k, got[i].Attrs[k], v, logs)
			}
		}
		if _, ok := got[i].Attrs["changes"]; ok != (w["changes"] != "") {
			t.Errorf("line %d: changes=%q, want it only when changes were folded\n%s", i+1, got[i].Attrs["changes"], logs)
		}
		if got[i].Level != slog.LevelInfo {
			t.Errorf("line %d at %s, want info", i+1, got[i].Level)
		}
	}
	if gap := got[1].Time.Sub(got[0].Time); gap < interval-10*time.Millisecond {
		t.Errorf("the two lines are %s apart, want at least the interval %s", gap, interval)
	}

	// After a quiet interval, a change is said at once, naming at most ten
	// instances and counting the rest.
	time.Sleep(interval)
	var many []string
	for i := range 13 {
		many = append(many, fmt.Sprintf("n%02d:1", i))
	}
	before := time.Now()
	src.send(many...)
	got = lines(3)
	if l := got[2]; l.Attrs["count"] != "13" || l.Attrs["removed"] != "b:1,c:1" ||
		l.Attrs["added"] != "n00:1,n01:1,n02:1,n03:1,n04:1,n05:1,n06:1,n07:1,n08:1,n09:1 (+3 more)" || l.Time.Sub(before) > interval/2 {
		t.Errorf("a change after a quiet interval: %v at +%s, want it at once with 10 instances named and 3 counted\n%s", l.Attrs, l.Time.Sub(before), logs)
	}
	time.Sleep(interval + 50*time.Millisecond)
	if n := len(logs.Messages("instances changed")); n != 3 {
		t.Errorf("%d lines, want 3 (no line without a change)\n%s", n, logs)
	}
}
