package main

import (
	"fmt"
	"math"
	"os"
	"strings"
)

// writeLoadChart draws the sd load time against N for gracekit, go-kit and
// the floor, on log-log axes, as a self-contained SVG.
func writeLoadChart(path string, points []loadPoint) error {
	if len(points) == 0 {
		return fmt.Errorf("chart: no points")
	}
	const (
		width, height                  = 640, 400
		left, right, top, bottom       = 70, 150, 40, 50
		plotW, plotH                   = width - left - right, height - top - bottom
		fontFamily                     = "sans-serif"
		colourOurs, colourKit, colourF = "#1f77b4", "#d62728", "#7f7f7f"
	)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range points {
		for _, v := range []float64{p.gracekit, p.gokit, p.floor} {
			if v > 0 {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	yMin, yMax := math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	xMin, xMax := float64(points[0].n), float64(points[len(points)-1].n)
	xMin, xMax = math.Pow(10, math.Floor(math.Log10(xMin))), math.Pow(10, math.Ceil(math.Log10(xMax)))
	x := func(n float64) float64 {
		return left + plotW*(math.Log10(n)-math.Log10(xMin))/(math.Log10(xMax)-math.Log10(xMin))
	}
	y := func(v float64) float64 {
		return top + plotH*(1-(math.Log10(v)-math.Log10(yMin))/(math.Log10(yMax)-math.Log10(yMin)))
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="12">`+"\n",
		width, height, width, height, fontFamily)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14" font-weight="bold">Time to load a service of N instances (median, log-log)</text>`+"\n", left)
	// Grid and tick labels at every decade, lighter lines at 2 and 5.
	for d := yMin; d <= yMax*1.0001; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := d * m
			if v > yMax*1.0001 {
				break
			}
			stroke := "#eeeeee"
			if m == 1 {
				stroke = "#cccccc"
			}
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", left, y(v), left+plotW, y(v), stroke)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-6, y(v), tick(v))
		}
	}
	for d := xMin; d <= xMax*1.0001; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := d * m
			if v > xMax*1.0001 {
				break
			}
			stroke := "#eeeeee"
			if m == 1 {
				stroke = "#cccccc"
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x(v), top, x(v), top+plotH, stroke)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(v), top+plotH+16, tick(v))
		}
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333333"/>`+"\n", left, top, plotW, plotH)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">instances (N)</text>`+"\n", left+plotW/2, height-10)
	fmt.Fprintf(&b, `<text x="16" y="%d" text-anchor="middle" transform="rotate(-90 16 %d)">milliseconds</text>`+"\n", top+plotH/2, top+plotH/2)

	series := []struct {
		name, colour, dash string
		v                  func(loadPoint) float64
	}{
		{"go-kit sd/zk", colourKit, "", func(p loadPoint) float64 { return p.gokit }},
		{"gracekit", colourOurs, "", func(p loadPoint) float64 { return p.gracekit }},
		{"floor (bare reads)", colourF, "6 4", func(p loadPoint) float64 { return p.floor }},
	}
	for i, s := range series {
		var pts []string
		for _, p := range points {
			if v := s.v(p); v > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(float64(p.n)), y(v)))
			}
		}
		dash := ""
		if s.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), s.colour, dash)
		for _, p := range points {
			if v := s.v(p); v > 0 {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s N=%d: %s ms</title></circle>`+"\n",
					x(float64(p.n)), y(v), s.colour, s.name, p.n, num(v))
			}
		}
		ly := top + 10 + i*20
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", left+plotW+12, ly, left+plotW+36, ly, s.colour, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", left+plotW+42, ly, s.name)
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// tick labels an axis value: 1, 20, 500, 1k, 10k.
func tick(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%gk", v/1000)
	default:
		return fmt.Sprintf("%g", v)
	}
}
