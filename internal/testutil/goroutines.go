package testutil

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"
)

// goroutineLabel is the pprof label that marks the goroutines of one test.
const goroutineLabel = "gracekit-test"

// Goroutines counts the goroutines of one test; see OwnGoroutines.
type Goroutines struct {
	tb     testing.TB
	labels string // the labels line of the test's records
}

// OwnGoroutines runs f under a pprof label naming tb. Every goroutine that
// f starts carries the label, and so does every goroutine those start, so
// the Goroutines f is given counts this test's goroutines alone: a test
// that checks goroutine counts or leaks can run in parallel with others.
//
// A goroutine started by a timer (time.AfterFunc) is not counted: it
// inherits no label from the code that set the timer. The package's
// goleak.VerifyTestMain still sees those.
func OwnGoroutines(tb testing.TB, f func(g Goroutines)) {
	tb.Helper()
	g := Goroutines{tb, "# labels: {" + strconv.Quote(goroutineLabel) + ":" + strconv.Quote(tb.Name()) + "}"}
	pprof.Do(context.Background(), pprof.Labels(goroutineLabel, tb.Name()), func(context.Context) { f(g) })
}

// Count is how many of the test's goroutines run now, the one that called
// OwnGoroutines included.
func (g Goroutines) Count() int {
	n, _ := g.read()
	return n
}

// Leave fails the test, listing their stacks, when more than n of its
// goroutines are still running after a few seconds (a goroutine on its
// way out gets that long, as goleak gives it).
func (g Goroutines) Leave(n int) {
	g.tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, stacks := g.read()
		if got <= n {
			return
		}
		if time.Now().After(deadline) {
			g.tb.Fatalf("%d goroutines of this test still run, want at most %d:\n%s", got, n, stacks)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// read counts the test's goroutines in a debug=1 goroutine profile, whose
// records start with "<count> @ <pcs>" and may hold a labels line, and
// gives their records.
func (g Goroutines) read() (int, string) {
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		g.tb.Fatalf("goroutine profile: %v", err)
	}
	total := 0
	var stacks strings.Builder
	// The profile opens with a header line, not a record.
	_, profile, _ := strings.Cut(b.String(), "\n")
	for record := range strings.SplitSeq(profile, "\n\n") {
		head, _, _ := strings.Cut(record, " @ ")
		n, err := strconv.Atoi(head)
		if err != nil || !strings.Contains(record, "\n"+g.labels+"\n") {
			continue
		}
		total += n
		stacks.WriteString(record + "\n\n")
	}
	return total, stacks.String()
}
