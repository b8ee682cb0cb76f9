package main

import (
	"fmt"
	"path/filepath"
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
	// that completed in second s of the load.
	Requests [][]int
	Failed   [][]int
	Marks    []mark
}

// newTimeline buckets samples by the second they completed in, from start.
func newTimeline(title string, names []string, start time.Time, samples []sample, marks []mark) *timeline {
	tl := &timeline{Title: title, Consumers: names, Marks: marks,
		Requests: make([][]int, len(names)), Failed: make([][]int, len(names))}
	secs := 0
	for _, s := range samples {
		secs = max(secs, second(s.at.Add(s.latency).Sub(start))+1)
	}
	for _, m := range marks {
		secs = max(secs, second(m.At)+1)
	}
	for c := range names {
		tl.Requests[c], tl.Failed[c] = make([]int, secs), make([]int, secs)
	}
	for _, s := range samples {
		if s.consumer < 0 || s.consumer >= len(names) {
			continue
		}
		i := second(s.at.Add(s.latency).Sub(start))
		tl.Requests[s.consumer][i]++
		if s.failed {
			tl.Failed[s.consumer][i]++
		}
	}
	return tl
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
		i, ok := row[r.Transport]
		if !ok {
			i = len(rows)
			row[r.Transport] = i
			rows = append(rows, nil)
		}
		rows[i] = append(rows[i], r.Timeline)
	}
	if len(rows) == 0 {
		return "", fmt.Errorf("no mode ran to its end: nothing to draw")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if err := writeSVGFile(abs, "make demo: a rolling restart (new ports) and a kill -9 under load", rows); err != nil {
		return "", err
	}
	return abs, nil
}
