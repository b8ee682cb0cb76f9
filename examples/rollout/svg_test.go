package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// svgElement is one start element of a chart, with its attributes, the
// text directly inside it, and the panel and consumer strip it is in.
type svgElement struct {
	name     string
	attrs    map[string]string
	text     string
	panel    string // data-title of the enclosing panel, if any
	consumer string // data-consumer of the enclosing consumer strip, if any
}

// parseSVG decodes the whole document, failing the test when it is not
// well-formed XML, and returns its elements in order.
func parseSVG(t *testing.T, b []byte) []svgElement {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	var out []svgElement
	var open []int // indexes into out of the elements not yet closed
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
			if len(open) == 0 && (tok.Name.Local != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element %v, want svg in the SVG namespace", tok.Name)
			}
			e := svgElement{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			if len(open) > 0 {
				parent := out[open[len(open)-1]]
				e.panel, e.consumer = parent.panel, parent.consumer
			}
			if e.name == "g" && e.attrs["class"] == "panel" {
				e.panel = e.attrs["data-title"]
			}
			if e.name == "g" && e.attrs["class"] == "consumer" {
				e.consumer = e.attrs["data-consumer"]
			}
			open = append(open, len(out))
			out = append(out, e)
		case xml.CharData:
			if len(open) > 0 {
				out[open[len(open)-1]].text += string(tok)
			}
		case xml.EndElement:
			open = open[:len(open)-1]
		}
	}
	if len(open) != 0 {
		t.Fatalf("unbalanced elements (%d open at the end)", len(open))
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
	tl := newTimeline("naive", []string{"gracekit", "go-kit"}, start, samples, []mark{{At: 4500 * time.Millisecond, Kind: markKill, ID: "quote-2"}}, nil)
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
// naive and each transport on its own row, a strip per consumer in each
// with its line, a failure bar for each second with failures and none
// elsewhere, and every SIGTERM, restart and kill marked.
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
		{newTimeline("graceful", names, start, good, marks, nil), newTimeline("naive", names, start, bad, marks, nil)},
		{newTimeline("graceful transport=grpc", grpcNames, start, good, marks[:4], nil)},
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
		case "failed", "crash-failed":
			if e.consumer != "cached" || e.attrs["data-consumer"] != "cached" {
				t.Errorf("a failure bar in %s's strip for %s, but only cached failed", e.consumer, e.attrs["data-consumer"])
			}
			failSeconds = append(failSeconds, e.attrs["class"]+" "+e.attrs["data-second"]+"/"+e.attrs["data-count"])
		}
	}
	if want := []string{"graceful", "naive", "graceful transport=grpc"}; !equal(panels, want) {
		t.Errorf("panels %q, want %q", panels, want)
	}
	if want := map[string]int{markSIGTERM: 2 + 2 + 2, markRestart: 2 + 2 + 2, markKill: 1 + 1}; !equalCounts(kinds, want) {
		t.Errorf("marks %v, want %v", kinds, want)
	}
	// A consumer has one color wherever it is.
	stroke := map[string]map[string]bool{}
	for _, e := range els {
		if e.attrs["class"] == "requests" {
			n := e.attrs["data-consumer"]
			if stroke[n] == nil {
				stroke[n] = map[string]bool{}
			}
			stroke[n][e.attrs["stroke"]] = true
		}
	}
	if len(stroke) != 4 {
		t.Errorf("%d consumers drawn, want 4 (gracekit, go-kit, cached, grpc-go)", len(stroke))
	}
	for n, cs := range stroke {
		if len(cs) != 1 {
			t.Errorf("%s is drawn in %d colors, want one", n, len(cs))
		}
	}
	if lines != 3*3 {
		t.Errorf("%d request lines, want one per consumer and panel (9)", lines)
	}
	if want := []string{"failed 2/4", "failed 3/3"}; !equal(failSeconds, want) {
		t.Errorf("failure bars (second/count) %q, want %q (cached's, in seconds 2 and 3)", failSeconds, want)
	}

	// Graceful is left of naive on one row; gRPC's row is below.
	x := map[string]float64{}
	y := map[string]float64{}
	for _, e := range els {
		if e.attrs["class"] == "strip" && e.consumer == "gracekit" {
			x[e.panel], _ = strconv.ParseFloat(e.attrs["x"], 64)
			y[e.panel], _ = strconv.ParseFloat(e.attrs["y"], 64)
		}
	}
	if !(x["graceful"] < x["naive"]) || y["graceful"] != y["naive"] || !(y["graceful transport=grpc"] > y["graceful"]) {
		t.Errorf("panel positions x=%v y=%v: want graceful beside naive, gRPC below", x, y)
	}
}

// crashFixture is a graceful run whose only failures are the kill -9's
// (3 of them, in second 7) and a naive run with 4 failures of its own
// (seconds 2 and 3) besides 2 of the crash's, as summarize counts them.
func crashFixture(t *testing.T) (graceful, naive *modeResult) {
	t.Helper()
	start := time.Unix(2000, 0)
	names := []string{"gracekit", "go-kit", "cached"}
	crash := &crashInfo{ID: "quote-2", Proc: "quote-2.run2", Addr: "127.0.0.1:4002", At: start.Add(7 * time.Second)}
	marks := []mark{{At: 2 * time.Second, Kind: markSIGTERM, ID: "quote-1"}, {At: 3 * time.Second, Kind: markRestart, ID: "quote-1"},
		{At: 7 * time.Second, Kind: markKill, ID: "quote-2"}}
	run := func(mode string, fail func(i int, s *sample)) *modeResult {
		var samples []sample
		for i := range 90 {
			s := sampleAt(start, float64(i)/10, i%3, false)
			fail(i, &s)
			samples = append(samples, s)
		}
		r := &modeResult{Mode: mode}
		r.summarize(samples, 9*time.Second, names, ledger{}, crash)
		r.Timeline = newTimeline(mode, names, start, samples, marks, crash)
		return r
	}
	atCrash := func(s *sample) { s.failed, s.upstream = true, crash.Addr }
	graceful = run("graceful", func(i int, s *sample) {
		if i == 70 || i == 72 || i == 75 { // after the kill, at its address
			atCrash(s)
		}
	})
	naive = run("naive", func(i int, s *sample) {
		switch {
		case i == 71 || i == 74:
			atCrash(s)
		case i == 20 || i == 23 || i == 26 || i == 35: // go-kit, cached, cached, cached
			s.failed, s.upstream = true, "127.0.0.1:4001"
		case i == 60: // at the crashed address, but before the kill: failed
			atCrash(s)
		}
	})
	return graceful, naive
}

// The timeline splits failures as the RESULT lines do: a failure the kill
// explains is crash_failed, never failed, second by second and in total.
func TestTimelineCountsCrashFailedAsTheResultLinesDo(t *testing.T) {
	graceful, naive := crashFixture(t)
	for _, r := range []*modeResult{graceful, naive} {
		tl := r.Timeline
		if tl.FailedN != r.Failed() || tl.CrashFailedN != r.CrashFailed() {
			t.Errorf("%s: timeline failed=%d crash_failed=%d, RESULT failed=%d crash_failed=%d", r.Mode, tl.FailedN, tl.CrashFailedN, r.Failed(), r.CrashFailed())
		}
		var f, cf int
		for c := range tl.Consumers {
			for s := range tl.Seconds() {
				f += tl.Failed[c][s]
				cf += tl.CrashFailed[c][s]
				if s != 7 && tl.CrashFailed[c][s] != 0 {
					t.Errorf("%s: %d crash_failed in second %d, want them all in second 7", r.Mode, tl.CrashFailed[c][s], s)
				}
			}
		}
		if f != r.Failed() || cf != r.CrashFailed() {
			t.Errorf("%s: the seconds add up to failed=%d crash_failed=%d, RESULT failed=%d crash_failed=%d", r.Mode, f, cf, r.Failed(), r.CrashFailed())
		}
	}
	if graceful.Failed() != 0 || graceful.CrashFailed() != 3 || naive.Failed() != 5 || naive.CrashFailed() != 2 {
		t.Fatalf("fixture: graceful %d/%d naive %d/%d, want 0/3 and 5/2", graceful.Failed(), graceful.CrashFailed(), naive.Failed(), naive.CrashFailed())
	}
}

// Each panel's headline names the kill -9's failures crash_failed and the
// rest failed, the counts of the mode's RESULT line; its bars are drawn
// apart (a graceful run has crash_failed bars and no failed ones).
func TestSVGHeadlineSaysCrashFailed(t *testing.T) {
	graceful, naive := crashFixture(t)
	noKill := *graceful.Timeline
	noKill.Title, noKill.Marks, noKill.CrashFailedN = "migrate", graceful.Timeline.Marks[:2], 0
	noKill.CrashFailed = nil
	var b bytes.Buffer
	writeSVG(&b, "t", [][]*timeline{{graceful.Timeline, naive.Timeline}, {&noKill}})
	els := parseSVG(t, b.Bytes())

	headlines := map[string]string{}
	bars := map[string]map[string]int{}
	for _, e := range els {
		switch e.attrs["class"] {
		case "headline":
			headlines[e.panel] = e.text
		case "failed", "crash-failed":
			if bars[e.panel] == nil {
				bars[e.panel] = map[string]int{}
			}
			n, _ := strconv.Atoi(e.attrs["data-count"])
			bars[e.panel][e.attrs["class"]] += n
		}
	}
	want := map[string]string{"graceful": "0 failed, 3 crash_failed", "naive": "5 failed, 2 crash_failed", "migrate": "0 failed"}
	for p, w := range want {
		if headlines[p] != w {
			t.Errorf("%s's headline %q, want %q", p, headlines[p], w)
		}
	}
	if g := bars["graceful"]; g["failed"] != 0 || g["crash-failed"] != 3 {
		t.Errorf("graceful's bars %v, want 3 crash-failed and no failed", g)
	}
	if n := bars["naive"]; n["failed"] != 5 || n["crash-failed"] != 2 {
		t.Errorf("naive's bars %v, want 5 failed and 2 crash-failed", n)
	}
	if !bytes.Contains(b.Bytes(), []byte(`class="legend-crash-failed"`)) {
		t.Error("the legend does not name crash_failed")
	}
}

// Every consumer has a strip of its own in every panel: one consumer
// group per consumer, its line inside its own strip, the strips apart, so
// that consumers under the same load do not hide one another.
func TestSVGDrawsEachConsumerInItsOwnStrip(t *testing.T) {
	graceful, naive := crashFixture(t)
	var b bytes.Buffer
	writeSVG(&b, "t", [][]*timeline{{graceful.Timeline, naive.Timeline}})
	els := parseSVG(t, b.Bytes())

	type strip struct{ top, bottom float64 }
	strips := map[string]map[string]strip{} // panel, consumer
	for _, e := range els {
		if e.name == "g" && e.attrs["class"] == "consumer" {
			if strips[e.panel] == nil {
				strips[e.panel] = map[string]strip{}
			}
			if _, dup := strips[e.panel][e.consumer]; dup {
				t.Errorf("%s: two strips for %s", e.panel, e.consumer)
			}
			top, _ := strconv.ParseFloat(e.attrs["data-top"], 64)
			bottom, _ := strconv.ParseFloat(e.attrs["data-bottom"], 64)
			strips[e.panel][e.consumer] = strip{top, bottom}
		}
	}
	for _, p := range []string{"graceful", "naive"} {
		if len(strips[p]) != 3 {
			t.Fatalf("%s: strips %v, want one for each of gracekit, go-kit, cached", p, strips[p])
		}
		var spans [][2]float64
		for _, s := range strips[p] {
			spans = append(spans, [2]float64{s.top, s.bottom})
		}
		for i := range spans {
			for j := range i {
				if spans[i][0] < spans[j][1] && spans[j][0] < spans[i][1] {
					t.Errorf("%s: strips %v and %v overlap", p, spans[i], spans[j])
				}
			}
		}
	}
	lines := map[string]int{}
	for _, e := range els {
		if e.attrs["class"] != "requests" {
			continue
		}
		if e.consumer != e.attrs["data-consumer"] {
			t.Errorf("%s: %s's line is in %q's strip", e.panel, e.attrs["data-consumer"], e.consumer)
		}
		lines[e.panel+"/"+e.consumer]++
		s := strips[e.panel][e.consumer]
		for _, pt := range strings.Fields(e.attrs["points"]) {
			_, ys, _ := strings.Cut(pt, ",")
			if y, _ := strconv.ParseFloat(ys, 64); y < s.top || y > s.bottom {
				t.Errorf("%s: %s's point %s is outside its strip [%v, %v]", e.panel, e.consumer, pt, s.top, s.bottom)
				break
			}
		}
	}
	if len(lines) != 6 {
		t.Errorf("lines %v, want one per consumer and panel", lines)
	}
	for k, n := range lines {
		if n != 1 {
			t.Errorf("%s: %d lines, want one", k, n)
		}
	}
}

// slowStartFixture is a slowstart run: steady 100ms, then two restart
// windows in which the gateway without slow start answers in 600ms and the
// one with it in 110ms.
func slowStartFixture() *modeResult {
	start := time.Unix(3000, 0)
	names := []string{consumerSSOn, consumerSSOff}
	windows := [][2]time.Duration{{4 * time.Second, 8 * time.Second}, {12 * time.Second, 16 * time.Second}}
	in := func(sec float64) bool {
		for _, w := range windows {
			if d := time.Duration(sec * float64(time.Second)); d >= w[0] && d < w[1] {
				return true
			}
		}
		return false
	}
	var samples []sample
	for i := range 200 {
		sec := float64(i) / 10
		for c, spike := range []time.Duration{110 * time.Millisecond, 600 * time.Millisecond} {
			lat := 100 * time.Millisecond
			if in(sec) {
				lat = spike
			}
			samples = append(samples, sample{at: start.Add(time.Duration(sec * float64(time.Second))), latency: lat, consumer: c})
		}
	}
	var marks []mark
	for _, w := range windows {
		marks = append(marks, mark{At: w[0], Kind: markSIGTERM, ID: "quote-ss-on/off-1"}, mark{At: w[0] + time.Second, Kind: markRestart, ID: "quote-ss-on/off-1"})
	}
	r := &modeResult{Mode: modeSlowStart, Transport: transportHTTP}
	r.summarize(samples, 20*time.Second, names, ledger{}, nil)
	r.Timeline = newTimeline(modeSlowStart, names, start, samples, marks, nil)
	r.Timeline.Latency, r.Timeline.Windows = true, windows
	return r
}

// When the slowstart mode ran, the chart has its panel, below the rolling
// restarts: each gateway's p99 per second in a strip of its own over the
// shaded restart windows, the one without slow start rising far above the
// one with it inside the windows.
func TestSVGDrawsSlowStartLatency(t *testing.T) {
	graceful, naive := crashFixture(t)
	graceful.Transport, naive.Transport = transportHTTP, transportHTTP
	ss := slowStartFixture()
	grpc := *graceful
	grpc.Transport, grpc.Timeline = transportGRPC, &timeline{}
	*grpc.Timeline = *graceful.Timeline
	grpc.Timeline.Title = "graceful transport=grpc"
	path, err := writeChart(filepath.Join(t.TempDir(), "demo.svg"), []*modeResult{graceful, naive, ss, &grpc})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	els := parseSVG(t, b)

	top := map[string]float64{}
	var windows int
	p99 := map[string][]float64{} // consumer: the y of each point
	for _, e := range els {
		switch e.attrs["class"] {
		case "strip":
			if _, ok := top[e.panel]; !ok {
				top[e.panel], _ = strconv.ParseFloat(e.attrs["y"], 64)
			}
		case "window":
			if e.panel == modeSlowStart {
				windows++
			}
		case "requests":
			if e.panel == modeSlowStart {
				t.Errorf("the slowstart panel draws %s's requests, want its p99", e.consumer)
			}
		case "p99":
			if e.panel != modeSlowStart || e.consumer != e.attrs["data-consumer"] {
				t.Errorf("a p99 line of %s in panel %q, strip %q", e.attrs["data-consumer"], e.panel, e.consumer)
			}
			for _, pt := range strings.Fields(e.attrs["points"]) {
				_, ys, _ := strings.Cut(pt, ",")
				y, _ := strconv.ParseFloat(ys, 64)
				p99[e.consumer] = append(p99[e.consumer], y)
			}
		}
	}
	if _, ok := top[modeSlowStart]; !ok {
		t.Fatalf("no slowstart panel: panels at %v", top)
	}
	if !(top[modeSlowStart] > top["graceful transport=grpc"] && top["graceful transport=grpc"] > top["graceful"]) {
		t.Errorf("panel tops %v: want HTTP's row, then gRPC's, then slowstart's", top)
	}
	if windows != 2 {
		t.Errorf("%d restart windows shaded, want 2", windows)
	}
	on, off := p99[consumerSSOn], p99[consumerSSOff]
	if n := ss.Timeline.Seconds(); len(on) != n || len(off) != n {
		t.Fatalf("p99 points on=%d off=%d, want %d each (a point a second)", len(on), len(off), n)
	}
	// The strips are stacked, so compare each line's rise above its own
	// steady level (second 0) in a window (second 5).
	riseOn, riseOff := on[0]-on[5], off[0]-off[5]
	if !(riseOff > 4*riseOn && riseOn >= 0) {
		t.Errorf("rise in the window: with slow start %.1f, without %.1f; want the spike without it", riseOn, riseOff)
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

// Issue 39, item 5: each panel's time axis runs to the end of its run's
// data, not to the longest scenario's: on a short run the rolling
// restarts (graceful beside naive, which share their axis) end at their
// last second, migrate at its own, and slowstart's 20 s stay its own.
func TestSVGTimeAxesFitTheRunsData(t *testing.T) {
	start := time.Unix(4000, 0)
	names := []string{"gracekit", "go-kit"}
	run := func(mode string, secs float64) *modeResult {
		var samples []sample
		for i := 0; float64(i)/10 < secs; i++ {
			samples = append(samples, sampleAt(start, float64(i)/10, i%2, false))
		}
		r := &modeResult{Mode: mode, Transport: transportHTTP}
		r.Timeline = newTimeline(mode, names, start, samples, []mark{{At: time.Second, Kind: markSIGTERM, ID: "quote-1"}}, nil)
		return r
	}
	graceful, naive, migrate := run("graceful", 4), run("naive", 3), run(modeMigrate, 2)
	path, err := writeChart(filepath.Join(t.TempDir(), "demo.svg"), []*modeResult{graceful, naive, migrate, slowStartFixture()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lastTick := map[string]int{}
	left := map[string]float64{}
	lastX := map[string]float64{}
	for _, e := range parseSVG(t, b) {
		switch e.attrs["class"] {
		case "tick":
			lastTick[e.panel], _ = strconv.Atoi(e.attrs["data-second"])
		case "strip":
			left[e.panel], _ = strconv.ParseFloat(e.attrs["x"], 64)
		case "requests", "p99":
			pts := strings.Fields(e.attrs["points"])
			xs, _, _ := strings.Cut(pts[len(pts)-1], ",")
			lastX[e.panel], _ = strconv.ParseFloat(xs, 64)
		}
	}
	want := map[string]int{"graceful": 4, "naive": 4, modeMigrate: 2, modeSlowStart: 20}
	for p, w := range want {
		if lastTick[p] != w {
			t.Errorf("%s's time axis runs to %ds, want %ds (its data's end)", p, lastTick[p], w)
		}
	}
	// The data reaches the right end of its panel: its last second's
	// point is drawn at its middle, half a second from the end.
	for _, p := range []string{"graceful", modeMigrate, modeSlowStart} {
		secW := svgPanelW / float64(want[p])
		if got, end := lastX[p], left[p]+svgPanelW; got < end-secW || got > end {
			t.Errorf("%s's last point at x=%.1f, want within its last second, before the panel's end at %.1f", p, got, end)
		}
	}
}
