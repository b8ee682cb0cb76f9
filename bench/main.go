// Command bench runs gracekit's side-by-side benchmarks against go-kit and
// prints one machine-readable line per figure:
//
//	BENCHENV server_cpus=<list> client_cpus=<list> gomaxprocs=<n> pinned=yes|no
//	BENCH name=<name> gracekit=<value><unit> gokit=<value><unit> ratio=<gokit/gracekit> min=<x> max=<y> rounds=<n>
//	BENCH name=<name> gracekit=<value><unit> floor=<value><unit> ratio=<floor/gracekit> min=<x> max=<y> rounds=<n>
//
// The values are medians of the figure's rounds and the ratio the median
// of the rounds' ratios; min and max are the rounds' spread. A ratio above
// 1 favours gracekit. The floor is the bare work the server
// does for the same result (see floor.go).
// Run it with `make bench`. Suites register themselves from their own files.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
)

// suite is one group of figures, such as "sd" or "endpoint".
type suite struct {
	name string
	run  func() error
}

var suites []suite

// svgPath is where the sd suite writes its chart of load time against N.
var svgPath = flag.String("svg", "", "write the sd suite's chart of load time against N to this SVG file")

func register(name string, run func() error) { suites = append(suites, suite{name, run}) }

// report prints one BENCH line of a single round. A zero or negative gokit
// value means there is no go-kit peer for this figure and prints "-" for
// it and the ratio.
func report(name string, gracekit, gokit float64, unit string) {
	reportRounds(name, []float64{gracekit}, []float64{gokit}, unit)
}

// reportRounds prints a BENCH line of paired rounds: round i of gracekit
// and of go-kit were measured together. The values are the medians of the
// rounds; the ratio is the median of the rounds' ratios, with their spread,
// so that one noisy round neither makes nor breaks a figure.
func reportRounds(name string, gracekit, gokit []float64, unit string) {
	if len(gokit) == 0 || median(gokit) <= 0 {
		fmt.Printf("BENCH name=%s gracekit=%s%s gokit=- ratio=- rounds=%d\n", name, num(median(gracekit)), unit, len(gracekit))
		return
	}
	fmt.Printf("BENCH name=%s gracekit=%s%s gokit=%s%s %s\n", name, num(median(gracekit)), unit, num(median(gokit)), unit, spread(gracekit, gokit))
}

// reportFloorRounds is reportRounds against the floor: the least the
// server itself needs for the same work, with ratio floor/gracekit (1
// would be gracekit costing nothing above the server).
func reportFloorRounds(name string, gracekit, floor []float64, unit string) {
	fmt.Printf("BENCH name=%s gracekit=%s%s floor=%s%s %s\n", name, num(median(gracekit)), unit, num(median(floor)), unit, spread(gracekit, floor))
}

// spread is the end of every ratio line: the median of the paired rounds'
// ratios peer/gracekit, their least and greatest, and how many rounds
// there were (the shorter side's count when one side took fewer).
func spread(gracekit, peer []float64) string {
	n := min(len(gracekit), len(peer))
	var ratios []float64
	for i := range n {
		switch {
		case gracekit[i] > 0:
			ratios = append(ratios, peer[i]/gracekit[i])
		case peer[i] == 0:
			ratios = append(ratios, 1) // both nothing: even
		default:
			ratios = append(ratios, math.Inf(1))
		}
	}
	if n == 0 {
		return "ratio=- rounds=0"
	}
	return fmt.Sprintf("ratio=%s min=%s max=%s rounds=%d", ratioString(median(ratios)), ratioString(slices.Min(ratios)), ratioString(slices.Max(ratios)), n)
}

func ratioString(r float64) string {
	switch {
	case math.IsInf(r, 1):
		return "inf"
	case r > 0 && r < 0.01:
		return fmt.Sprintf("%.4f", r) // 1 watch against thousands is not 0
	}
	return fmt.Sprintf("%.2f", r)
}

// median is the middle value (the mean of the two middle ones for an even
// count), 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.4f", v)
	}
}

func main() {
	only := flag.String("only", "", "comma-separated suites to run (default: all)")
	flag.Parse()
	if err := pin(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sort.Slice(suites, func(i, j int) bool { return suites[i].name < suites[j].name })
	want := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s != "" {
			want[s] = true
		}
	}
	failed := false
	for _, s := range suites {
		if len(want) > 0 && !want[s.name] {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: suite %s\n", s.name)
		if err := s.run(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: suite %s: %v\n", s.name, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
