package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The chart's geometry, in SVG user units.
const (
	svgPanelW  = 560 // one panel's plot area
	svgReqH    = 150 // requests per second, per consumer
	svgFailH   = 70  // failures per second, per consumer, below
	svgGap     = 24  // between the two plots of a panel
	svgMarginL = 56
	svgMarginT = 58
	svgMarginB = 40
	svgColGap  = 70
	svgRowGap  = 50
	svgLegendH = 34
)

// consumerColors are the lines' colors, in the consumers' order.
var consumerColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"}

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

// writeSVG draws one panel per timeline, a row per transport, its modes
// side by side on one time scale and one request scale, so that graceful
// and naive compare at a glance: requests per second per consumer above,
// failures per second per consumer below, and a vertical line at each
// SIGTERM, restart and kill.
func writeSVG(w io.Writer, title string, rows [][]*timeline) {
	cols, secs, maxReq, maxFail := 0, 1, 1, 1
	// A consumer keeps its color in every panel: rows may name different
	// ones (HTTP's cached gateway, gRPC's grpc-go).
	colors := map[string]string{}
	var names []string
	for _, row := range rows {
		cols = max(cols, len(row))
		for _, tl := range row {
			for _, n := range tl.Consumers {
				if _, ok := colors[n]; !ok {
					colors[n] = consumerColors[len(names)%len(consumerColors)]
					names = append(names, n)
				}
			}
			secs = max(secs, tl.Seconds())
			for c := range tl.Consumers {
				for s := range tl.Requests[c] {
					maxReq = max(maxReq, tl.Requests[c][s])
					maxFail = max(maxFail, tl.Failed[c][s])
				}
			}
		}
	}
	maxReq, maxFail = niceCeil(maxReq), niceCeil(maxFail)
	panelH := svgReqH + svgGap + svgFailH
	width := svgMarginL + cols*svgPanelW + (cols-1)*svgColGap + 30
	height := svgMarginT + svgLegendH + len(rows)*(panelH+svgMarginB) + (len(rows)-1)*svgRowGap + 10

	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	p(`<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", svgMarginL, esc(title))
	p(`<text x="%d" y="40" fill="#555">requests per second (lines) and failed requests per second (bars), per consumer; each second counts the requests that completed in it</text>`+"\n", svgMarginL)

	// The legend: every consumer, then the marks.
	lx, ly := svgMarginL, svgMarginT+8
	for _, name := range names {
		p(`<g class="legend-consumer"><rect x="%d" y="%d" width="14" height="4" fill="%s"/><text x="%d" y="%d">%s</text></g>`+"\n", lx, ly-4, colors[name], lx+18, ly, esc(name))
		lx += 24 + 7*len(name) + 16
	}
	for _, kind := range []string{markSIGTERM, markRestart, markKill} {
		st := markStyle[kind]
		p(`<g class="legend-mark"><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2" stroke-dasharray="%s"/><text x="%d" y="%d">%s</text></g>`+"\n", lx, ly-10, lx, ly+3, st.color, st.dash, lx+6, ly, esc(kind))
		lx += 16 + 7*len(kind) + 16
	}

	for r, row := range rows {
		for c, tl := range row {
			x0 := svgMarginL + c*(svgPanelW+svgColGap)
			y0 := svgMarginT + svgLegendH + r*(panelH+svgMarginB+svgRowGap)
			writePanel(w, tl, colors, x0, y0, secs, maxReq, maxFail)
		}
	}
	p("</svg>\n")
}

func writePanel(w io.Writer, tl *timeline, colors map[string]string, x0, y0, secs, maxReq, maxFail int) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	sx := func(s float64) float64 { return float64(x0) + s*float64(svgPanelW)/float64(secs) }
	reqY := func(n int) float64 {
		return float64(y0) + float64(svgReqH) - float64(n)*float64(svgReqH)/float64(maxReq)
	}
	failTop := y0 + svgReqH + svgGap
	failY := func(n int) float64 {
		return float64(failTop) + float64(svgFailH) - float64(n)*float64(svgFailH)/float64(maxFail)
	}

	var failed int
	for c := range tl.Consumers {
		for _, n := range tl.Failed[c] {
			failed += n
		}
	}
	p(`<g class="panel" data-title="%s">`+"\n", esc(tl.Title))
	p(`<text x="%d" y="%d" font-size="13" font-weight="bold">%s</text><text x="%d" y="%d" fill="#555" text-anchor="end">%d failed</text>`+"\n",
		x0, y0-8, esc(tl.Title), x0+svgPanelW, y0-8, failed)
	// Frames, grid and axes.
	for _, f := range []struct{ top, h, max int }{{y0, svgReqH, maxReq}, {failTop, svgFailH, maxFail}} {
		p(`<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#bbb"/>`+"\n", x0, f.top, svgPanelW, f.h)
		p(`<text x="%d" y="%d" text-anchor="end" fill="#555">%d</text><text x="%d" y="%d" text-anchor="end" fill="#555">0</text>`+"\n",
			x0-4, f.top+4, f.max, x0-4, f.top+f.h+3)
	}
	p(`<text x="%d" y="%d" text-anchor="end" fill="#555" transform="rotate(-90 %d %d)">req/s</text>`+"\n", x0-30, y0+svgReqH/2, x0-30, y0+svgReqH/2)
	p(`<text x="%d" y="%d" text-anchor="end" fill="#555" transform="rotate(-90 %d %d)">failed/s</text>`+"\n", x0-30, failTop+svgFailH/2+20, x0-30, failTop+svgFailH/2+20)
	step := tickStep(secs)
	for s := 0; s <= secs; s += step {
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/><text x="%.1f" y="%d" text-anchor="middle" fill="#555">%ds</text>`+"\n",
			sx(float64(s)), y0, sx(float64(s)), failTop+svgFailH, sx(float64(s)), failTop+svgFailH+14, s)
	}
	// Requests: one line per consumer, a point per second's middle.
	for c := range tl.Consumers {
		var pts []string
		for s, n := range tl.Requests[c] {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", sx(float64(s)+0.5), reqY(n)))
		}
		p(`<polyline class="requests" data-consumer="%s" fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", esc(tl.Consumers[c]), colors[tl.Consumers[c]], strings.Join(pts, " "))
	}
	// Failures: bars side by side within each second, one per consumer.
	bw := float64(svgPanelW) / float64(secs) / float64(max(1, len(tl.Consumers)))
	for c := range tl.Consumers {
		for s, n := range tl.Failed[c] {
			if n == 0 {
				continue
			}
			x := sx(float64(s)) + float64(c)*bw
			p(`<rect class="failed" data-consumer="%s" data-second="%d" data-count="%d" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %d failed in second %d</title></rect>`+"\n",
				esc(tl.Consumers[c]), s, n, x, failY(n), max(bw, 1), float64(failTop+svgFailH)-failY(n), colors[tl.Consumers[c]], esc(tl.Consumers[c]), n, s)
		}
	}
	// Marks across both plots, labeled above the panel in turn so that
	// close ones stay readable.
	for i, m := range tl.Marks {
		st := markStyle[m.Kind]
		x := sx(m.At.Seconds())
		p(`<g class="mark" data-kind="%s" data-id="%s"><line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="1.5" stroke-dasharray="%s"/>`,
			esc(m.Kind), esc(m.ID), x, y0, x, failTop+svgFailH, st.color, st.dash)
		p(`<title>%s %s at %.1fs</title>`, esc(m.Kind), esc(m.ID), m.At.Seconds())
		if m.Kind != markRestart {
			p(`<text x="%.1f" y="%d" font-size="9" fill="%s" text-anchor="middle">%s</text>`, x, y0+10+(i%3)*10, st.color, esc(shortMark(m)))
		}
		p("</g>\n")
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
