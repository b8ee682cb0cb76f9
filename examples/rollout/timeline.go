package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"
)

// Kinds of marks on a timeline.
const (
	markSIGTERM = "SIGTERM"
	markRestart = "restart" // the restarted process answers ready
	markKill    = "kill -9"
)

// mark is one event of a mode's run, at its offset from the load's start.
type mark struct {
	At   time.Duration
	Kind string // markSIGTERM, markRestart or markKill
	ID   string // the provider's instance id
}

// timeline is a mode's load, second by second, per consumer: what the
// SVG draws.
type timeline struct {
	Title     string
	Consumers []string
	// Requests[c][s] and Failed[c][s] count the requests of consumer c
	// that completed in second s of the load; CrashFailed[c][s] counts
	// those of its failures the kill -9 explains (crashInfo.explains), which
	// Failed leaves out, as the RESULT lines do.
	Requests    [][]int
	Failed      [][]int
	CrashFailed [][]int
	// P99[c][s] is the p99 latency of consumer c's requests that completed
	// in second s (0 when none did).
	P99   [][]time.Duration
	Marks []mark
	// Latency draws P99 instead of Requests (the slowstart mode); Windows
	// are its restart windows, as offsets from the start, shaded.
	Latency bool
	Windows [][2]time.Duration
	// WindowLabel names the Windows in the legend; empty: restart windows.
	WindowLabel string
	// FailedN and CrashFailedN are the headline's counts: the failures
	// the mode counts as failed, and those of its kill -9 window.
	FailedN, CrashFailedN int
	// Axis names the time axis the panel shares with the panels of the
	// same Axis (the rolling restarts: graceful beside naive, over each
	// transport), which runs to the longest of them; an empty Axis is the
	// panel's own, fitted to its data.
	Axis string
}

// newTimeline buckets samples by the second they completed in, from start;
// crash, when not nil, is the provider killed under load.
func newTimeline(title string, names []string, start time.Time, samples []sample, marks []mark, crash *crashInfo) *timeline {
	tl := &timeline{Title: title, Consumers: names, Marks: marks, Requests: make([][]int, len(names)),
		Failed: make([][]int, len(names)), CrashFailed: make([][]int, len(names)), P99: make([][]time.Duration, len(names))}
	secs := 0
	for _, s := range samples {
		secs = max(secs, second(s.at.Add(s.latency).Sub(start))+1)
	}
	for _, m := range marks {
		secs = max(secs, second(m.At)+1)
	}
	lat := make([][][]time.Duration, len(names))
	for c := range names {
		tl.Requests[c], tl.Failed[c], tl.CrashFailed[c] = make([]int, secs), make([]int, secs), make([]int, secs)
		tl.P99[c] = make([]time.Duration, secs)
		lat[c] = make([][]time.Duration, secs)
	}
	for _, s := range samples {
		if s.consumer < 0 || s.consumer >= len(names) {
			continue
		}
		i := second(s.at.Add(s.latency).Sub(start))
		tl.Requests[s.consumer][i]++
		lat[s.consumer][i] = append(lat[s.consumer][i], s.latency)
		switch {
		case crash.explains(s):
			tl.CrashFailed[s.consumer][i]++
			tl.CrashFailedN++
		case s.failed:
			tl.Failed[s.consumer][i]++
			tl.FailedN++
		}
	}
	for c := range lat {
		for i, l := range lat[c] {
			slices.Sort(l)
			tl.P99[c][i] = percentile(l, 99)
		}
	}
	return tl
}

// chartTitle names what the chart shows; the outage only when it ran.
func chartTitle(results []*modeResult) string {
	t := "make demo: a rolling restart (new ports) and a kill -9 under load; the migration; slow start"
	for _, r := range results {
		if r.Mode == modeOutage {
			return t + "; a ZooKeeper outage"
		}
	}
	return t
}

// windowLabel is what the timeline's shaded windows are.
func (tl *timeline) windowLabel() string {
	if tl.WindowLabel != "" {
		return tl.WindowLabel
	}
	return "restart window (SIGTERM to ready + settle)"
}

func second(d time.Duration) int { return max(0, int(d/time.Second)) }

// Seconds is the timeline's length.
func (tl *timeline) Seconds() int {
	if len(tl.Requests) == 0 {
		return 0
	}
	return len(tl.Requests[0])
}

// writeChart writes the chart of every mode's timeline to path, a row per
// transport with its modes side by side, and returns the path made
// absolute.
func writeChart(path string, results []*modeResult) (string, error) {
	var rows [][]*timeline
	row := map[string]int{}
	for _, r := range results {
		if r.Timeline == nil {
			continue
		}
		// graceful beside naive, a row per transport; the scenarios run
		// once (migrate, slowstart) share a last row, so the chart stays
		// two panels wide.
		key := r.Transport
		if r.Mode == modeMigrate || r.Mode == modeSlowStart || r.Mode == modeOutage {
			key = "once" // each on a time axis of its own
		} else {
			r.Timeline.Axis = "rolling"
		}
		i, ok := row[key]
		if !ok {
			i = len(rows)
			row[key] = i
			rows = append(rows, nil)
		}
		rows[i] = append(rows[i], r.Timeline)
	}
	// The once row goes last, whatever order the modes ran in.
	if i, ok := row["once"]; ok {
		once := rows[i]
		rows = append(slices.Delete(rows, i, i+1), once)
	}
	if len(rows) == 0 {
		return "", fmt.Errorf("no mode ran to its end: nothing to draw")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if err := writeSVGFile(abs, chartTitle(results), rows); err != nil {
		return "", err
	}
	return abs, nil
}
