// Command testsum reads `go test -json` on its standard input and writes
// what a person needs from it: go test's usual lines (a package's ok or
// FAIL, a build error, the output of each test that failed, and nothing of
// the tests that passed), then the names of the tests that failed, the
// slowest tests, and a closing count. make test and make stress pipe
// through it. Written by hand because the well-kept tools that do this
// (gotestsum) are a download more for a newcomer's first make test, and the
// part we need is a page of code.
//
// It exits 1 when a test or a package failed, or when the input ended
// without a package result (go test died), else 0.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output, build-fail
	Test       string
	Elapsed    float64
	Output     string
}

type key struct{ pkg, test string }

type result struct {
	key
	elapsed time.Duration
}

func main() {
	slowest := flag.Int("slowest", 10, "how many of the slowest tests to list at the end (0: none)")
	label := flag.String("label", "tests", "the word before the closing count")
	quiet := flag.Bool("summary", false, "write only the summary: the failed tests, the slowest and the count")
	flag.Parse()
	out := io.Writer(os.Stdout)
	var lines io.Writer = out
	if *quiet {
		lines = io.Discard
	}
	os.Exit(run(os.Stdin, lines, out, *slowest, *label))
}

// run writes go test's usual lines to lines and the summary to out.
func run(in io.Reader, lines, out io.Writer, slowest int, label string) int {
	var (
		output   = map[key][]string{} // a running test's lines, kept until it ends
		failed   []key
		passed   int
		results  []result
		pkgsDone = map[string]bool{}
		pkgsSeen = map[string]bool{}
		bad      bool
	)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil || ev.Action == "" {
			// go test's own lines (a vet or setup failure) are not JSON.
			fmt.Fprintln(lines, string(line))
			continue
		}
		if ev.Package != "" {
			pkgsSeen[ev.Package] = true
		}
		k := key{ev.Package, ev.Test}
		switch ev.Action {
		case "build-output":
			fmt.Fprint(lines, ev.Output)
		case "build-fail":
			bad = true
		case "output":
			if ev.Test == "" {
				// The package's own lines: ok, FAIL, panics outside a test.
				if !strings.HasPrefix(ev.Output, "=== ") && ev.Output != "PASS\n" && ev.Output != "FAIL\n" {
					fmt.Fprint(lines, ev.Output)
				}
				continue
			}
			output[k] = append(output[k], ev.Output)
		case "pass", "skip":
			if ev.Test == "" {
				pkgsDone[ev.Package] = true
				continue
			}
			if ev.Action == "pass" {
				passed++
			}
			if !strings.Contains(ev.Test, "/") {
				results = append(results, result{k, seconds(ev.Elapsed)})
			}
			delete(output, k)
		case "fail":
			if ev.Test == "" {
				pkgsDone[ev.Package] = true
				bad = true
				continue
			}
			failed = append(failed, k)
			if !strings.Contains(ev.Test, "/") {
				results = append(results, result{k, seconds(ev.Elapsed)})
			}
			for _, l := range output[k] {
				if !strings.HasPrefix(l, "=== ") {
					fmt.Fprint(lines, l)
				}
			}
			delete(output, k)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(lines, "testsum: reading go test's output: %v\n", err)
		bad = true
	}
	// A test binary that died (a panic in a goroutine, a timeout) leaves its
	// running tests without an end: their lines say why.
	for k, kept := range output {
		if len(kept) > 0 {
			fmt.Fprintf(lines, "--- UNFINISHED: %s %s\n", k.pkg, k.test)
			for _, l := range kept {
				fmt.Fprint(lines, l)
			}
		}
	}
	for p := range pkgsSeen {
		if !pkgsDone[p] {
			bad = true
		}
	}
	if slowest > 0 && len(results) > 0 {
		slices.SortFunc(results, func(a, b result) int { return cmp.Compare(b.elapsed, a.elapsed) })
		fmt.Fprintf(out, "%s: the %d slowest tests\n", label, min(slowest, len(results)))
		for _, r := range results[:min(slowest, len(results))] {
			fmt.Fprintf(out, "  %7.1fs  %s %s\n", r.elapsed.Seconds(), shortPkg(r.pkg), r.test)
		}
	}
	for _, k := range failed {
		fmt.Fprintf(out, "FAILED: %s %s\n", k.pkg, k.test)
	}
	fmt.Fprintf(out, "%s: %d passed, %d failed\n", label, passed, len(failed))
	if bad || len(failed) > 0 {
		return 1
	}
	return 0
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func shortPkg(p string) string {
	return strings.TrimPrefix(p, "github.com/gracekit/gracekit/")
}
