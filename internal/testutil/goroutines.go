package testutil

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
)

// goroutineLabel is the pprof label that marks the goroutines of one test.
const goroutineLabel = "gracekit-test"

// OwnGoroutines runs f under a pprof label naming tb. Every goroutine that
// f starts carries the label, and so does every goroutine those start, so
// count, which f is given, counts this test's goroutines alone: a test that
// checks goroutine counts can run in parallel with others.
//
// A goroutine started by a timer (time.AfterFunc) is not counted: it
// inherits no label from the code that set the timer.
func OwnGoroutines(tb testing.TB, f func(count func() int)) {
	tb.Helper()
	want := "# labels: {" + strconv.Quote(goroutineLabel) + ":" + strconv.Quote(tb.Name()) + "}"
	count := func() int {
		var b bytes.Buffer
		if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
			tb.Fatalf("goroutine profile: %v", err)
		}
		return labeledGoroutines(b.String(), want)
	}
	pprof.Do(context.Background(), pprof.Labels(goroutineLabel, tb.Name()), func(context.Context) { f(count) })
}

// labeledGoroutines adds up the records of a debug=1 goroutine profile
// whose labels line is want. A record starts with "<count> @ <pcs>".
func labeledGoroutines(profile, want string) int {
	total, n := 0, 0
	for line := range strings.Lines(profile) {
		line = strings.TrimSpace(line)
		if c, _, ok := strings.Cut(line, " @ "); ok {
			n, _ = strconv.Atoi(c)
			continue
		}
		if line == want {
			total += n
			n = 0
		}
	}
	return total
}
