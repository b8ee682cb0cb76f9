package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// stopReport is the STOPREPORT line a provider prints when it exits
// (examples/CONTRACT.md).
type stopReport struct {
	Mode                string  `json:"mode"`
	DurationMS          float64 `json:"duration_ms"`
	FlushTargets        int     `json:"flush_targets"`
	FlushAcks           int     `json:"flush_acks"`
	AfterDeregistration int     `json:"after_deregistration"`
	InFlightAtDrain     int     `json:"in_flight_at_drain"`
}

const stopReportPrefix = "STOPREPORT "

// parseStopReport returns the last STOPREPORT line of r, or nil when there
// is none or it does not parse.
func parseStopReport(r io.Reader) (*stopReport, error) {
	var last *stopReport
	var lastErr error
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, stopReportPrefix+"{")
		if i < 0 {
			continue
		}
		var rep stopReport
		if err := json.Unmarshal([]byte(strings.TrimSpace(line[i+len(stopReportPrefix):])), &rep); err != nil {
			lastErr = fmt.Errorf("malformed STOPREPORT line %q: %w", line, err)
			continue
		}
		last, lastErr = &rep, nil
	}
	if err := sc.Err(); err != nil {
		return last, err
	}
	return last, lastErr
}

func stopReportFile(path string) (*stopReport, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseStopReport(f)
}

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// stopResult is one provider's restart in the rolling restart.
type stopResult struct {
	ID           string
	Report       *stopReport // nil when the provider printed none
	ReportErr    string
	Wall         time.Duration // SIGTERM to exit, as the driver saw it
	Killed       bool          // still running after the stop limit
	Exit         string
	BackReady    time.Duration // SIGTERM to /readyz 200 again
	FailedDuring int           // failed requests from SIGTERM until back
}

// StopMS is the stop time the provider reported, or the wall time.
func (s stopResult) StopMS() float64 {
	if s.Report != nil {
		return s.Report.DurationMS
	}
	return ms(s.Wall)
}

// modeResult is what one mode of the demo measured.
type modeResult struct {
	Mode       string
	Workers    int
	Gateways   int
	Latency    time.Duration
	Elapsed    time.Duration
	Requests   int
	Posts      int
	Failed     int
	FailedPost int
	P50, P99   time.Duration
	Max        time.Duration
	Stops      []stopResult
	Reasons    []reasonCount      // most frequent first
	Retries    map[string]float64 // gateway retries by route, from /metrics; nil if unknown
	// Invalid, when set, says why the run does not show what the mode
	// does: the load ended before every restart was seen through.
	Invalid string
}

type reasonCount struct {
	Reason string
	Count  int
}

// summarize fills the request statistics of r from the samples.
func (r *modeResult) summarize(samples []sample, elapsed time.Duration) {
	r.Elapsed = elapsed
	r.Requests = len(samples)
	lat := make([]time.Duration, 0, len(samples))
	reasons := map[string]int{}
	for _, s := range samples {
		lat = append(lat, s.latency)
		if s.post {
			r.Posts++
		}
		if s.failed {
			r.Failed++
			if s.post {
				r.FailedPost++
			}
			reasons[s.reason]++
		}
	}
	slices.Sort(lat)
	r.P50, r.P99 = percentile(lat, 50), percentile(lat, 99)
	if len(lat) > 0 {
		r.Max = lat[len(lat)-1]
	}
	r.Reasons = r.Reasons[:0]
	for reason, n := range reasons {
		r.Reasons = append(r.Reasons, reasonCount{reason, n})
	}
	slices.SortFunc(r.Reasons, func(a, b reasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Reason, b.Reason))
	})
}

// MaxStopMS is the longest provider stop of the rolling restart.
func (r *modeResult) MaxStopMS() float64 {
	var m float64
	for _, s := range r.Stops {
		m = max(m, s.StopMS())
	}
	return m
}

// resultLine is the machine-readable summary of a mode.
// An invalid mode's line ends with " invalid=1".
func resultLine(r *modeResult) string {
	line := fmt.Sprintf("RESULT mode=%s requests=%d failed=%d p99_ms=%.1f max_stop_ms=%.1f",
		r.Mode, r.Requests, r.Failed, ms(r.P99), r.MaxStopMS())
	if r.Invalid != "" {
		line += " invalid=1"
	}
	return line
}

// writeTable prints the readable report of a mode.
func writeTable(w io.Writer, r *modeResult) {
	rate := 0.0
	if r.Elapsed > 0 {
		rate = float64(r.Requests) / r.Elapsed.Seconds()
	}
	fmt.Fprintf(w, "=== mode %s: %d requests in %.1fs (%.0f req/s), %d workers over %d gateways, provider latency %v\n",
		r.Mode, r.Requests, r.Elapsed.Seconds(), rate, r.Workers, r.Gateways, r.Latency)
	if r.Invalid != "" {
		fmt.Fprintf(w, "  INVALID: %s\n", r.Invalid)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  requests\tGET /api/quote\tPOST /api/orders\tfailed\tfailed POST\tp50_ms\tp99_ms\tmax_ms\t")
	fmt.Fprintf(tw, "  %d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t\n",
		r.Requests, r.Requests-r.Posts, r.Posts, r.Failed, r.FailedPost, ms(r.P50), ms(r.P99), ms(r.Max))
	tw.Flush()
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  provider\tstop_ms\tsource\texit\tflush_acks\tafter_dereg\tin_flight_at_drain\tback_ready_ms\tfailed_during\t")
	var acks, targets, after, failed int
	for _, s := range r.Stops {
		src, flush, afterS, inflight := "wall", "-", "-", "-"
		if s.Report != nil {
			src = "STOPREPORT"
			flush = fmt.Sprintf("%d/%d", s.Report.FlushAcks, s.Report.FlushTargets)
			afterS = fmt.Sprint(s.Report.AfterDeregistration)
			inflight = fmt.Sprint(s.Report.InFlightAtDrain)
			acks += s.Report.FlushAcks
			targets += s.Report.FlushTargets
			after += s.Report.AfterDeregistration
		}
		exit := s.Exit
		if s.Killed {
			exit += " (killed)"
		}
		fmt.Fprintf(tw, "  %s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%.0f\t%d\t\n",
			s.ID, s.StopMS(), src, exit, flush, afterS, inflight, ms(s.BackReady), s.FailedDuring)
		failed += s.FailedDuring
	}
	fmt.Fprintf(tw, "  total\tmax %.1f\t\t\t%d/%d\t%d\t\t\t%d\t\n", r.MaxStopMS(), acks, targets, after, failed)
	tw.Flush()
	if r.Retries != nil {
		fmt.Fprintf(w, "  gateway retries (gateway /metrics): %s\n", formatRetries(r.Retries))
	}
	for _, s := range r.Stops {
		if s.ReportErr != "" {
			fmt.Fprintf(w, "  note: %s: %s\n", s.ID, s.ReportErr)
		}
	}
	if len(r.Reasons) > 0 {
		fmt.Fprintln(w, "  failures by reason:")
		for i, rc := range r.Reasons {
			if i == 5 {
				fmt.Fprintf(w, "    … %d more reasons\n", len(r.Reasons)-5)
				break
			}
			fmt.Fprintf(w, "    %6d  %s\n", rc.Count, rc.Reason)
		}
	}
	fmt.Fprintln(w)
}

// failedBetween counts failed requests that were in flight at some time in
// [from, to].
func failedBetween(samples []sample, from, to time.Time) int {
	n := 0
	for _, s := range samples {
		if s.failed && !s.at.After(to) && !s.at.Add(s.latency).Before(from) {
			n++
		}
	}
	return n
}

// parseRetries sums the samples of every metric named *retries_total in a
// Prometheus text exposition, by their route label ("" when they have none).
// It returns nil when there is no such metric.
func parseRetries(r io.Reader) map[string]float64 {
	var out map[string]float64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, rest := line, "", ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
			if line[i] == '{' {
				j := strings.IndexByte(rest, '}')
				if j < 0 {
					continue
				}
				labels, rest = rest[1:j], rest[j+1:]
			}
		}
		if !strings.HasSuffix(name, "retries_total") {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64) // a timestamp may follow
		if err != nil {
			continue
		}
		route := ""
		for _, l := range strings.Split(labels, ",") {
			if k, val, ok := strings.Cut(strings.TrimSpace(l), "="); ok && k == "route" {
				route = strings.Trim(val, `"`)
			}
		}
		if out == nil {
			out = map[string]float64{}
		}
		out[route] += v
	}
	return out
}

func formatRetries(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" ")
		}
		if k == "" {
			k = "all"
		}
		fmt.Fprintf(&b, "%s=%.0f", k, m[keys[i]])
	}
	return b.String()
}
