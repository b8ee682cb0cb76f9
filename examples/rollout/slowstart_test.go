package main

import (
	"strings"
	"testing"
	"time"
)

// A request belongs to a restart window by its send time, [from, to);
// each consumer's p99 is its own, inside and outside every window.
func TestSlowStartPatternP99ByWindow(t *testing.T) {
	t0 := time.Now()
	at := func(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }
	windows := []span{{at(10), at(14)}, {at(20), at(24)}}
	var samples []sample
	add := func(sec float64, consumer int, lat time.Duration) {
		samples = append(samples, sample{at: at(sec), consumer: consumer, latency: lat})
	}
	for i := range 100 {
		add(float64(i)/100, 0, 50*time.Millisecond)    // steady, before
		add(30+float64(i)/100, 1, 60*time.Millisecond) // steady, after
		add(10+float64(i)/100, 1, 70*time.Millisecond) // in the first window
	}
	add(14, 0, time.Second)          // at the first window's end: steady
	add(19.999, 0, 2*time.Second)    // just before the second: steady
	add(20, 1, 900*time.Millisecond) // at its start: inside
	add(23.9, 1, 800*time.Millisecond)
	add(12, 7, time.Hour) // no such consumer: ignored

	got := p99ByWindow(samples, 2, windows)
	want := []windowP99{
		{Restart: 0, Steady: time.Second, NRestart: 0, NSteady: 102},
		{Restart: 800 * time.Millisecond, Steady: 60 * time.Millisecond, NRestart: 102, NSteady: 100},
	}
	for c := range want {
		if got[c] != want[c] {
			t.Errorf("consumer %d: %+v, want %+v", c, got[c], want[c])
		}
	}
}

// The slowstart mode prints one RESULT line per consumer, on and off, and
// notes a ratio that misses the target.
func TestSlowStartPatternResultLinesAndNotes(t *testing.T) {
	r := &modeResult{Mode: modeSlowStart, SSWindow: 4 * time.Second, SlowStart: []ssFigures{
		{Name: consumerSSOn, On: true, Requests: 10, P99Restart: 160 * time.Millisecond, P99Steady: 100 * time.Millisecond},
		{Name: consumerSSOff, Requests: 9, Failed: 1, Duplicated: 2, P99Restart: 250 * time.Millisecond, P99Steady: 100 * time.Millisecond},
	}}
	want := "RESULT mode=slowstart slow_start=on requests=10 failed=0 duplicated=0 p99_restart_ms=160.0 p99_steady_ms=100.0 restart_window_s=4\n" +
		"RESULT mode=slowstart slow_start=off requests=9 failed=1 duplicated=2 p99_restart_ms=250.0 p99_steady_ms=100.0 restart_window_s=4"
	if got := resultLine(r); got != want {
		t.Errorf("resultLine:\n%s\nwant\n%s", got, want)
	}
	notes := ssNotes(r)
	if len(notes) != 2 || !strings.Contains(notes[0], "1.6x") || !strings.Contains(notes[1], "2.5x") {
		t.Errorf("notes %q, want one for 1.6x with slow start and one for 2.5x without", notes)
	}
	r.SlowStart[0].P99Restart, r.SlowStart[1].P99Restart = 150*time.Millisecond, 300*time.Millisecond
	if notes := ssNotes(r); len(notes) != 0 {
		t.Errorf("notes %q at exactly 1.5x and 3x, want none", notes)
	}
	r.Invalid = "the load ended"
	if got := resultLine(r); strings.Count(got, " invalid=1") != 2 {
		t.Errorf("an invalid run's lines %q: want invalid=1 on both", got)
	}
	r.Invalid = ""
	r.SlowStart[1].Failed = 0
	r.Total.Duplicated = 2
	if why := verdict(r); !strings.Contains(why, "slowstart mode failed 0 and duplicated 2") {
		t.Errorf("verdict %q, want the duplicates named", why)
	}
}
