package testutil

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestOwnGoroutinesCountsThisTestsAlone(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	// Another test's goroutines, started outside the label.
	for range 3 {
		wg.Go(func() { <-stop })
	}
	OwnGoroutines(t, func(g Goroutines) {
		if n := g.Count(); n != 1 {
			t.Fatalf("Count() = %d before any was started, want 1 (this one)", n)
		}
		mine := make(chan struct{})
		var own sync.WaitGroup
		for range 4 {
			own.Go(func() {
				// One more, started by a labeled goroutine.
				own.Go(func() { <-mine })
				<-mine
			})
		}
		WaitFor(t, "eight labeled goroutines more", func() bool { return g.Count() == 9 })
		close(mine)
		own.Wait()
		g.Leave(1)
	})
}

// fatalRecorder is a testing.TB whose Fatalf records instead of ending
// the test.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
}

func TestLeaveNamesTheGoroutinesLeftRunning(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	defer close(stop)
	rec := &fatalRecorder{TB: t}
	OwnGoroutines(rec, func(g Goroutines) {
		go leftRunning(stop)
		WaitFor(t, "the goroutine counted", func() bool { return g.Count() == 2 })
		g.Leave(1)
	})
	if !strings.Contains(rec.fatal, "2 goroutines of this test still run, want at most 1") || !strings.Contains(rec.fatal, "testutil.leftRunning") {
		t.Fatalf("Leave with one goroutine left over said %q", rec.fatal)
	}
}

func leftRunning(stop <-chan struct{}) { <-stop }
