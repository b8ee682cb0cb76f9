package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The chart's geometry, in SVG user units. A panel is one mode; inside it
// each consumer has a strip of its own (small multiples: lines of
// consumers under the same load would lie on top of each other).
const (
	svgPanelW   = 560 // one panel's plot area
	svgStripH   = 56  // a consumer's requests per second (or p99 latency)
	svgFailH    = 22  // its failures per second, just below
	svgFailGap  = 3   // between the two
	svgStripGap = 20  // between consumers: the next one's name
	svgHeadH    = 34  // a panel's headline, above its first strip
	svgAxisH    = 22  // the time ticks, below its last strip
	svgMarginL  = 56
	svgMarginT  = 58
	svgColGap   = 70
	svgRowGap   = 24
	svgLegendH  = 30
)

// consumerColors are the consumers' colors, in the order they first
// appear; red and gray are the failure bars'.
var consumerColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"}

// Fills of the failure bars and of a restart window.
const (
	failedFill      = "#d62728"
	crashFailedFill = "#9a9a9a"
	windowFill      = "#fbe7b5"
)

// markStyle draws each kind of mark.
var markStyle = map[string]struct{ color, dash string }{
	markSIGTERM: {"#d4a017", "4,3"},
	markRestart: {"#2e8b57", "2,2"},
	markKill:    {"#c0392b", ""},
}

// writeSVGFile writes the chart of rows (each a row of panels, e.g.
// graceful beside naive) to path.
func writeSVGFile(path string, title string, rows [][]*timeline) error {
	var b bytes.Buffer
	writeSVG(&b, title, rows)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// svgScale is what every panel shares, so that panels compare at a
// glance: one request scale, one failure scale, one latency scale, and a
// color per consumer; and the time scales, each fitted to the data of the
// panels that share it (timeline.Axis).
type svgScale struct {
	maxReq, maxFail int
	maxLatMS        int
	colors          map[string]string
	secs            map[*timeline]int // the seconds each panel's time axis runs to
}

// stripsH is the height of n consumers' strips.
func stripsH(n int) int {
	n = max(n, 1)
	return n*(svgStripH+svgFailGap+svgFailH) + (n-1)*svgStripGap
}

// writeSVG draws one panel per timeline, its rows one under the other and
// its panels side by side: per consumer, requests per second (or, for a
// Latency timeline, p99 latency per second over its shaded restart
// windows) above and failures per second below, failed and crash_failed
// apart, and a vertical line at each SIGTERM, restart and kill.
func writeSVG(w io.Writer, title string, rows [][]*timeline) {
	sc := svgScale{maxReq: 1, maxFail: 1, maxLatMS: 1, colors: map[string]string{}, secs: map[*timeline]int{}}
	axes := map[string]int{} // the longest panel of each shared axis
	for _, row := range rows {
		for _, tl := range row {
			if tl.Axis != "" {
				axes[tl.Axis] = max(axes[tl.Axis], tl.Seconds())
			}
		}
	}
	cols := 0
	var windows []string // the shaded windows' labels, each once
	for _, row := range rows {
		cols = max(cols, len(row))
		for _, tl := range row {
			sc.secs[tl] = max(1, tl.Seconds(), axes[tl.Axis])
			if label := tl.windowLabel(); len(tl.Windows) > 0 && !slices.Contains(windows, label) {
				windows = append(windows, label)
			}
			for c, n := range tl.Consumers {
				if _, ok := sc.colors[n]; !ok {
					sc.colors[n] = consumerColors[len(sc.colors)%len(consumerColors)]
				}
				for s := range tl.Requests[c] {
					sc.maxFail = max(sc.maxFail, tl.failedAt(c, s)+tl.crashFailedAt(c, s))
					if tl.Latency {
						sc.maxLatMS = max(sc.maxLatMS, int((tl.P99[c][s]+time.Millisecond-1)/time.Millisecond))
					} else {
						sc.maxReq = max(sc.maxReq, tl.Requests[c][s])
					}
				}
			}
		}
	}
	sc.maxReq, sc.maxFail, sc.maxLatMS = niceCeil(sc.maxReq), niceCeil(sc.maxFail), niceCeil(sc.maxLatMS)

	rowH := make([]int, len(rows))
	height := svgMarginT + svgLegendH
	for r, row := range rows {
		n := 1
		for _, tl := range row {
			n = max(n, len(tl.Consumers))
		}
		rowH[r] = svgHeadH + stripsH(n) + svgAxisH
		height += rowH[r] + svgRowGap
	}
	width := svgMarginL + cols*svgPanelW + max(0, cols-1)*svgColGap + 30

	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	p(`<defs><pattern id="crash-hatch" width="4" height="4" patternUnits="userSpaceOnUse"><rect width="4" height="4" fill="%s"/><path d="M0,4 L4,0" stroke="#ffffff" stroke-width="1"/></pattern></defs>`+"\n", crashFailedFill)
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	p(`<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", svgMarginL, esc(title))
	p(`<text x="%d" y="40" fill="#555">a strip per consumer: requests per second (line; slowstart: p99 latency per second) and failed requests per second (bars, scale on the left); each second counts the requests that completed in it</text>`+"\n", svgMarginL)

	// The legend: the bars, the windows, the marks. The consumers are named
	// on their strips.
	lx, ly := svgMarginL, svgMarginT+8
	item := func(class, swatch, label string) {
		p(`<g class="%s">%s<text x="%d" y="%d">%s</text></g>`+"\n", class, swatch, lx+18, ly, esc(label))
		lx += 18 + 6*len(label) + 22
	}
	item("legend-failed", fmt.Sprintf(`<rect x="%d" y="%d" width="12" height="10" fill="%s"/>`, lx, ly-9, failedFill), "failed")
	item("legend-crash-failed", fmt.Sprintf(`<rect x="%d" y="%d" width="12" height="10" fill="url(#crash-hatch)"/>`, lx, ly-9), "crash_failed (at the killed provider, after the kill)")
	if len(windows) > 0 {
		item("legend-window", fmt.Sprintf(`<rect x="%d" y="%d" width="12" height="10" fill="%s"/>`, lx, ly-9, windowFill), strings.Join(windows, "; "))
	}
	for _, kind := range []string{markSIGTERM, markRestart, markKill} {
		st := markStyle[kind]
		item("legend-mark", fmt.Sprintf(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2" stroke-dasharray="%s"/>`, lx+6, ly-10, lx+6, ly+3, st.color, st.dash), kind)
	}

	y := svgMarginT + svgLegendH
	for r, row := range rows {
		for c, tl := range row {
			writePanel(w, tl, sc, svgMarginL+c*(svgPanelW+svgColGap), y+svgHeadH)
		}
		y += rowH[r] + svgRowGap
	}
	p("</svg>\n")
}

// failedAt and crashFailedAt are consumer c's counts in second s (a
// timeline made by hand may leave CrashFailed out).
func (tl *timeline) failedAt(c, s int) int {
	if c < len(tl.Failed) && s < len(tl.Failed[c]) {
		return tl.Failed[c][s]
	}
	return 0
}

func (tl *timeline) crashFailedAt(c, s int) int {
	if c < len(tl.CrashFailed) && s < len(tl.CrashFailed[c]) {
		return tl.CrashFailed[c][s]
	}
	return 0
}

// headline is a panel's count of failures, named as the RESULT lines name
// them: crash_failed apart from failed whenever the mode killed a provider.
func (tl *timeline) headline() string {
	crashed := tl.CrashFailedN > 0
	for _, m := range tl.Marks {
		crashed = crashed || m.Kind == markKill
	}
	if crashed {
		return fmt.Sprintf("%d failed, %d crash_failed", tl.FailedN, tl.CrashFailedN)
	}
	return fmt.Sprintf("%d failed", tl.FailedN)
}

// writePanel draws tl with its first strip's top left corner at x0, y0.
func writePanel(w io.Writer, tl *timeline, sc svgScale, x0, y0 int) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	secs := sc.secs[tl]
	secW := float64(svgPanelW) / float64(secs)
	sx := func(s float64) float64 { return float64(x0) + s*secW }
	bottom := y0 + stripsH(len(tl.Consumers))

	p(`<g class="panel" data-title="%s" data-failed="%d" data-crash-failed="%d">`+"\n", esc(tl.Title), tl.FailedN, tl.CrashFailedN)
	p(`<text x="%d" y="%d" font-size="13" font-weight="bold">%s</text><text class="headline" x="%d" y="%d" fill="#555" text-anchor="end">%s</text>`+"\n",
		x0, y0-svgHeadH+14, esc(tl.Title), x0+svgPanelW, y0-svgHeadH+14, esc(tl.headline()))
	// Restart windows and the time grid behind every strip.
	for _, win := range tl.Windows {
		p(`<rect class="window" data-from="%.1f" data-to="%.1f" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n",
			win[0].Seconds(), win[1].Seconds(), sx(win[0].Seconds()), y0, (win[1]-win[0]).Seconds()*secW, bottom-y0, windowFill)
	}
	step := tickStep(secs)
	for s := 0; s <= secs; s += step {
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/><text class="tick" data-second="%d" x="%.1f" y="%d" text-anchor="middle" fill="#555">%ds</text>`+"\n",
			sx(float64(s)), y0, sx(float64(s)), bottom, s, sx(float64(s)), bottom+14, s)
	}
	for c := range tl.Consumers {
		writeStrip(w, tl, sc, c, x0, y0+c*(svgStripH+svgFailGap+svgFailH+svgStripGap), sx)
	}
	// Marks across every strip, labeled at the top in turn so that close
	// ones stay readable.
	for i, m := range tl.Marks {
		st := markStyle[m.Kind]
		x := sx(m.At.Seconds())
		p(`<g class="mark" data-kind="%s" data-id="%s"><line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="1.5" stroke-dasharray="%s"/>`,
			esc(m.Kind), esc(m.ID), x, y0, x, bottom, st.color, st.dash)
		p(`<title>%s %s at %.1fs</title>`, esc(m.Kind), esc(m.ID), m.At.Seconds())
		if m.Kind != markRestart {
			p(`<text x="%.1f" y="%d" font-size="9" fill="%s" text-anchor="middle">%s</text>`, x, y0+9+(i%3)*9, st.color, esc(shortMark(m)))
		}
		p("</g>\n")
	}
	p("</g>\n")
}

// writeStrip draws consumer c of tl with its top left corner at x0, top.
func writeStrip(w io.Writer, tl *timeline, sc svgScale, c, x0, top int, sx func(float64) float64) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	name, color := tl.Consumers[c], sc.colors[tl.Consumers[c]]
	failTop := top + svgStripH + svgFailGap
	yOf := func(top, h int, v, vmax float64) float64 { return float64(top+h) - min(v, vmax)*float64(h)/vmax }

	unit, vmax := "req/s", sc.maxReq
	if tl.Latency {
		unit, vmax = "p99 ms", sc.maxLatMS
	}
	p(`<g class="consumer" data-consumer="%s" data-top="%d" data-bottom="%d">`+"\n", esc(name), top, failTop+svgFailH)
	p(`<text x="%d" y="%d" font-weight="bold" fill="%s">%s</text>`+"\n", x0+2, top-4, color, esc(name))
	p(`<rect class="strip" x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#bbb"/><rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#ddd"/>`+"\n",
		x0, top, svgPanelW, svgStripH, x0, failTop, svgPanelW, svgFailH)
	p(`<text x="%d" y="%d" text-anchor="end" fill="#555">%d</text><text x="%d" y="%d" text-anchor="end" fill="#555">0</text><text x="%d" y="%d" text-anchor="end" fill="#555" font-size="9">%s</text>`+"\n",
		x0-4, top+9, vmax, x0-4, top+svgStripH, x0-4, top+svgStripH/2+4, unit)
	p(`<text x="%d" y="%d" text-anchor="end" fill="#999" font-size="9">%d</text>`+"\n", x0-4, failTop+9, sc.maxFail)

	var pts []string
	for s, n := range tl.Requests[c] {
		v := float64(n)
		if tl.Latency {
			if n == 0 {
				continue // no p99 in a second without requests
			}
			v = float64(tl.P99[c][s]) / float64(time.Millisecond)
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", sx(float64(s)+0.5), yOf(top, svgStripH, v, float64(vmax))))
	}
	class := "requests"
	if tl.Latency {
		class = "p99"
	}
	p(`<polyline class="%s" data-consumer="%s" fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", class, esc(name), color, strings.Join(pts, " "))

	// A bar a second: failed at the bottom, crash_failed stacked on it.
	bw := max(1, sx(1)-sx(0)-1)
	for s := range tl.Requests[c] {
		base := float64(failTop + svgFailH)
		for _, part := range []struct {
			class, fill, label string
			n                  int
		}{{"failed", failedFill, "failed", tl.failedAt(c, s)}, {"crash-failed", "url(#crash-hatch)", "crash_failed", tl.crashFailedAt(c, s)}} {
			if part.n == 0 {
				continue
			}
			h := float64(part.n) * float64(svgFailH) / float64(sc.maxFail)
			p(`<rect class="%s" data-consumer="%s" data-second="%d" data-count="%d" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %d %s in second %d</title></rect>`+"\n",
				part.class, esc(name), s, part.n, sx(float64(s))+0.5, base-h, bw, h, part.fill, esc(name), part.n, part.label, s)
			base -= h
		}
	}
	p("</g>\n")
}

// shortMark is a mark's label on the chart: the instance's number.
func shortMark(m mark) string {
	id := m.ID
	if i := strings.LastIndexByte(id, '-'); i >= 0 {
		id = id[i+1:]
	}
	if m.Kind == markKill {
		return "kill " + id
	}
	return "TERM " + id
}

// niceCeil rounds n up to 1, 2 or 5 times a power of ten.
func niceCeil(n int) int {
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*p >= n {
				return m * p
			}
		}
	}
}

// tickStep is the seconds between labeled ticks: about ten of them.
func tickStep(secs int) int {
	for _, s := range []int{1, 2, 5, 10, 15, 20, 30, 60} {
		if secs/s <= 12 {
			return s
		}
	}
	return 120
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
