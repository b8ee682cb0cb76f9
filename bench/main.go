// Command bench runs gracekit's side-by-side benchmarks against go-kit and
// prints one machine-readable line per figure:
//
//	BENCH name=<name> gracekit=<value><unit> gokit=<value><unit> ratio=<gokit/gracekit>
//	BENCH name=<name> gracekit=<value><unit> floor=<value><unit> ratio=<floor/gracekit>
//
// A ratio above 1 favours gracekit. The floor is the bare work the server
// does for the same result (see floor.go).
// Run it with `make bench`. Suites register themselves from their own files.
package main

import (
	"flag"
	"fmt"
	"os"
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

// report prints one BENCH line. A zero or negative gokit value means there is
// no go-kit peer for this figure and prints "-" for it and the ratio.
func report(name string, gracekit, gokit float64, unit string) {
	if gokit <= 0 {
		fmt.Printf("BENCH name=%s gracekit=%s%s gokit=- ratio=-\n", name, num(gracekit), unit)
		return
	}
	ratio := "inf"
	if gracekit > 0 {
		ratio = fmt.Sprintf("%.2f", gokit/gracekit)
	}
	fmt.Printf("BENCH name=%s gracekit=%s%s gokit=%s%s ratio=%s\n", name, num(gracekit), unit, num(gokit), unit, ratio)
}

// reportFloor prints a BENCH line against the floor: the least the server
// itself needs for the same work, with ratio floor/gracekit (1 would be
// gracekit costing nothing above the server).
func reportFloor(name string, gracekit, floor float64, unit string) {
	ratio := "-"
	if gracekit > 0 {
		ratio = fmt.Sprintf("%.2f", floor/gracekit)
	}
	fmt.Printf("BENCH name=%s gracekit=%s%s floor=%s%s ratio=%s\n", name, num(gracekit), unit, num(floor), unit, ratio)
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
