package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// svgElement is one start element of a chart, with its attributes.
type svgElement struct {
	name  string
	attrs map[string]string
}

// parseSVG decodes the whole document, failing the test when it is not
// well-formed XML, and returns its elements in order.
func parseSVG(t *testing.T, b []byte) []svgElement {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	var out []svgElement
	depth := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v\n%s", err, b)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if depth == 0 && (tok.Name.Local != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element %v, want svg in the SVG namespace", tok.Name)
			}
			depth++
			e := svgElement{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			out = append(out, e)
		case xml.EndElement:
			depth--
		}
	}
	if depth != 0 {
		t.Fatalf("unbalanced elements (depth %d at the end)", depth)
	}
	return out
}

func sampleAt(start time.Time, sec float64, consumer int, failed bool) sample {
	return sample{at: start.Add(time.Duration(sec * float64(time.Second))), latency: 10 * time.Millisecond, consumer: consumer, failed: failed}
}

// Requests and failures land in the second they completed in, per
// consumer; the timeline is as long as its last sample or mark.
func TestTimelineBucketsBySecondAndConsumer(t *testing.T) {
	start := time.Now()
	samples := []sample{
		sampleAt(start, 0.1, 0, false), sampleAt(start, 0.5, 0, false), sampleAt(start, 0.7, 1, true),
		sampleAt(start, 2.2, 1, false), sampleAt(start, 2.3, 1, true),
	}
	tl := newTimeline("naive", []string{"gracekit", "go-kit"}, start, samples, []mark{{At: 4500 * time.Millisecond, Kind: markKill, ID: "quote-2"}})
	if got := tl.Seconds(); got != 5 {
		t.Fatalf("Seconds() = %d, want 5 (the kill at 4.5s)", got)
	}
	want := map[[2]int][2]int{{0, 0}: {2, 0}, {1, 0}: {1, 1}, {1, 2}: {2, 1}}
	for c := range 2 {
		for s := range 5 {
			w := want[[2]int{c, s}]
			if tl.Requests[c][s] != w[0] || tl.Failed[c][s] != w[1] {
				t.Errorf("consumer %d second %d: %d requests %d failed, want %v", c, s, tl.Requests[c][s], tl.Failed[c][s], w)
			}
		}
	}
}

// The chart is well-formed SVG with a panel per mode, graceful beside
// naive and each transport on its own row, a line per consumer in each, a
// failure bar for each second with failures and none elsewhere, and every
// SIGTERM, restart and kill marked.
func TestSVGDrawsPanelsFailuresAndMarks(t *testing.T) {
	start := time.Now()
	names := []string{"gracekit", "go-kit", "cached"}
	marks := []mark{
		{At: 2 * time.Second, Kind: markSIGTERM, ID: "quote-1"}, {At: 3 * time.Second, Kind: markRestart, ID: "quote-1"},
		{At: 4 * time.Second, Kind: markSIGTERM, ID: "quote-2"}, {At: 5 * time.Second, Kind: markRestart, ID: "quote-2"},
		{At: 7 * time.Second, Kind: markKill, ID: "quote-2"},
	}
	var good, bad []sample
	for i := range 80 {
		sec := float64(i) / 10
		good = append(good, sampleAt(start, sec, i%3, false))
		bad = append(bad, sampleAt(start, sec, i%3, i%3 == 2 && sec >= 2 && sec < 4)) // cached fails in seconds 2 and 3
	}
	grpcNames := []string{"gracekit", "grpc-go", "go-kit"}
	rows := [][]*timeline{
		{newTimeline("graceful", names, start, good, marks), newTimeline("naive", names, start, bad, marks)},
		{newTimeline("graceful transport=grpc", grpcNames, start, good, marks[:4])},
	}
	path := filepath.Join(t.TempDir(), "sub", "demo.svg")
	if err := writeSVGFile(path, `a <title> & "quotes"`, rows); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	els := parseSVG(t, b)

	var panels []string
	kinds := map[string]int{}
	lines := 0
	var failSeconds []string
	for _, e := range els {
		switch e.attrs["class"] {
		case "panel":
			panels = append(panels, e.attrs["data-title"])
		case "mark":
			kinds[e.attrs["data-kind"]]++
		case "requests":
			lines++
		case "failed":
			if e.attrs["data-consumer"] != "cached" {
				t.Errorf("a failure bar for %s, which failed nothing", e.attrs["data-consumer"])
			}
			failSeconds = append(failSeconds, e.attrs["data-second"]+"/"+e.attrs["data-count"])
		}
	}
	if want := []string{"graceful", "naive", "graceful transport=grpc"}; !equal(panels, want) {
		t.Errorf("panels %q, want %q", panels, want)
	}
	if want := map[string]int{markSIGTERM: 2 + 2 + 2, markRestart: 2 + 2 + 2, markKill: 1 + 1}; !equalCounts(kinds, want) {
		t.Errorf("marks %v, want %v", kinds, want)
	}
	// A consumer has one color wherever it is, and the legend names each once.
	legend, stroke := map[string]bool{}, map[string]map[string]bool{}
	for i, e := range els {
		if e.attrs["class"] == "legend-consumer" && i+2 < len(els) {
			legend[els[i+1].attrs["fill"]] = true
		}
		if e.attrs["class"] == "requests" {
			n := e.attrs["data-consumer"]
			if stroke[n] == nil {
				stroke[n] = map[string]bool{}
			}
			stroke[n][e.attrs["stroke"]] = true
		}
	}
	if len(legend) != 4 || len(stroke) != 4 {
		t.Errorf("%d legend colors and %d consumers drawn, want 4 (gracekit, go-kit, cached, grpc-go)", len(legend), len(stroke))
	}
	for n, cs := range stroke {
		if len(cs) != 1 {
			t.Errorf("%s is drawn in %d colors, want one", n, len(cs))
		}
	}
	if lines != 3*3 {
		t.Errorf("%d request lines, want one per consumer and panel (9)", lines)
	}
	if want := []string{"2/4", "3/3"}; !equal(failSeconds, want) {
		t.Errorf("failure bars (second/count) %q, want %q (cached's, in seconds 2 and 3)", failSeconds, want)
	}

	// Graceful is left of naive on one row; gRPC's row is below.
	x := map[string]float64{}
	y := map[string]float64{}
	for i, e := range els {
		if e.attrs["class"] == "panel" && i+1 < len(els) {
			x[e.attrs["data-title"]], _ = strconv.ParseFloat(els[i+1].attrs["x"], 64)
			y[e.attrs["data-title"]], _ = strconv.ParseFloat(els[i+1].attrs["y"], 64)
		}
	}
	if !(x["graceful"] < x["naive"]) || y["graceful"] != y["naive"] || !(y["graceful transport=grpc"] > y["graceful"]) {
		t.Errorf("panel positions x=%v y=%v: want graceful beside naive, gRPC below", x, y)
	}
}

// The demo writes no chart when no mode ran to its end, and says so.
func TestWriteChartRefusesNothingToDraw(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo.svg")
	if _, err := writeChart(path, []*modeResult{{Mode: "graceful"}}); err == nil {
		t.Fatal("writeChart with no timeline: nil error")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a chart was written anyway: %v", err)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
