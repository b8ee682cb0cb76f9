package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gracekit/gracekit/examples/internal/drive"
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
	CutByDrain          int     `json:"cut_by_drain"`
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

// crashInfo names the provider process the driver killed with SIGKILL.
type crashInfo struct {
	ID   string    // instance id, e.g. quote-2
	Proc string    // its ledger name, e.g. quote-2.run2
	Addr string    // host:port it listened on
	At   time.Time // when it was killed
}

// explains tells whether the crash is why sample s failed: its last
// attempt went to the crashed address and it ended at or after the kill.
// The RESULT lines' crash_failed and the chart's bars both count by it.
func (c *crashInfo) explains(s sample) bool {
	return c != nil && s.failed && s.upstream == c.Addr && !s.at.Add(s.latency).Before(c.At)
}

// consumerResult is what one consumer (gateway) of a mode got.
type consumerResult struct {
	Name       string
	Requests   int
	Posts      int
	Failed     int // failed requests, those the crash explains excepted
	FailedPost int
	// Duplicated counts keys executed more than once, those re-sent after
	// the crash excepted.
	Duplicated int
	// CrashInFlight counts requests in flight on the crashed provider when
	// it was killed that failed; CrashAfter, requests sent to its dead
	// address afterwards (by a consumer whose list still held it) that
	// failed. A failure is the crash's when its last attempt went to the
	// crashed address (the consumer's 502 names it as "upstream") and it
	// ended at or after the kill.
	CrashInFlight int
	CrashAfter    int
	// CrashResent counts POSTs executed by the crashed provider and then
	// again elsewhere: re-sent by the consumer.
	CrashResent int
	// OKNotExecuted counts POSTs answered 200 whose key no provider
	// executed; it must be 0.
	OKNotExecuted int
	P50, P99, Max time.Duration
	Retries       map[string]float64 // retries by route, from /metrics; nil if unknown
}

// CrashFailed is the requests that failed because the provider crashed.
func (c consumerResult) CrashFailed() int { return c.CrashInFlight + c.CrashAfter }

// modeResult is what one mode of the demo measured.
type modeResult struct {
	Mode      string
	Transport string // "grpc", or "http" or "" for HTTP
	Workers   int
	Latency   time.Duration
	Elapsed   time.Duration
	Consumers []consumerResult
	Total     consumerResult // every consumer together
	Stops     []stopResult
	Crash     *crashInfo    // nil when no provider was killed
	CrashExit string        // how the killed process ended
	Reasons   []reasonCount // failures by consumer and reason, most frequent first
	// Metrics are lines about gracekit's own metrics, from the gracekit
	// gateway's /metrics.
	Metrics []string
	// Invalid, when set, says why the run does not show what the mode
	// does: the load ended before every restart was seen through.
	Invalid string
	// Timeline is the run second by second, for the chart.
	Timeline *timeline
	// Drain is the migrate mode's operator drain, nil in other modes;
	// DrainNames are the consumers its counts are by.
	Drain      *drainInfo
	DrainNames []string
	// SlowStart is the slowstart mode's figures, one per consumer, nil in
	// other modes; SSWindow is how long each restart window lasts after
	// the restarted providers are ready.
	SlowStart []ssFigures
	SSWindow  time.Duration
	// Outage is the outage mode's figures, nil in other modes.
	Outage *outageFigures
}

// Requests etc. are the totals of every consumer.
func (r *modeResult) Requests() int    { return r.Total.Requests }
func (r *modeResult) Failed() int      { return r.Total.Failed }
func (r *modeResult) Duplicated() int  { return r.Total.Duplicated }
func (r *modeResult) CrashFailed() int { return r.Total.CrashFailed() }

type reasonCount struct {
	Reason string
	Count  int
}

// ledger maps an idempotency key to the provider processes that executed
// it, one entry per execution.
type ledger map[string][]string

// readLedgers reads every "<process>.keys" file of dir.
func readLedgers(dir string) (ledger, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.keys"))
	if err != nil {
		return nil, err
	}
	lg, err := drive.ReadLedgers(files...)
	if err != nil {
		return nil, err
	}
	return ledger(lg.Execs), nil
}

// summarize fills the request statistics of r from the samples, the
// ledger of the providers' executions and the crash, if any. names are
// the consumers' names, by index.
func (r *modeResult) summarize(samples []sample, elapsed time.Duration, names []string, led ledger, crash *crashInfo) {
	r.Elapsed = elapsed
	r.Crash = crash
	r.Consumers = make([]consumerResult, len(names))
	lat := make([][]time.Duration, len(names))
	var all []time.Duration
	reasons := map[string]int{}
	for i, n := range names {
		r.Consumers[i].Name = n
	}
	for _, s := range samples {
		c := &r.Consumers[s.consumer]
		c.Requests++
		lat[s.consumer] = append(lat[s.consumer], s.latency)
		all = append(all, s.latency)
		if s.post {
			c.Posts++
		}
		if s.failed {
			switch {
			case crash.explains(s):
				if s.at.After(crash.At) {
					c.CrashAfter++
				} else {
					c.CrashInFlight++
				}
			default:
				c.Failed++
				if s.post {
					c.FailedPost++
				}
				reasons[c.Name+": "+s.reason]++
			}
		}
		if s.post && s.key != "" {
			execs := led[s.key]
			if !s.failed && len(execs) == 0 {
				c.OKNotExecuted++
			}
			if len(execs) > 1 {
				if crash != nil && slices.Contains(execs, crash.Proc) {
					c.CrashResent++
				} else {
					c.Duplicated++
				}
			}
		}
	}
	r.Total = consumerResult{Name: "total"}
	for i := range r.Consumers {
		c := &r.Consumers[i]
		slices.Sort(lat[i])
		c.P50, c.P99 = percentile(lat[i], 50), percentile(lat[i], 99)
		if n := len(lat[i]); n > 0 {
			c.Max = lat[i][n-1]
		}
		t := &r.Total
		t.Requests += c.Requests
		t.Posts += c.Posts
		t.Failed += c.Failed
		t.FailedPost += c.FailedPost
		t.Duplicated += c.Duplicated
		t.CrashInFlight += c.CrashInFlight
		t.CrashAfter += c.CrashAfter
		t.CrashResent += c.CrashResent
		t.OKNotExecuted += c.OKNotExecuted
		for k, v := range c.Retries {
			if t.Retries == nil {
				t.Retries = map[string]float64{}
			}
			t.Retries[k] += v
		}
	}
	slices.Sort(all)
	r.Total.P50, r.Total.P99 = percentile(all, 50), percentile(all, 99)
	if len(all) > 0 {
		r.Total.Max = all[len(all)-1]
	}
	r.Reasons = r.Reasons[:0]
	for _, rc := range drive.RankReasons(reasons) {
		r.Reasons = append(r.Reasons, reasonCount(rc))
	}
}

// MaxStopMS is the longest provider stop of the rolling restart.
func (r *modeResult) MaxStopMS() float64 {
	var m float64
	for _, s := range r.Stops {
		m = max(m, s.StopMS())
	}
	return m
}

// grpc tells whether the mode ran over gRPC.
func (r *modeResult) grpc() bool { return r.Transport == transportGRPC }

// resultLine is the machine-readable summary of a mode: a gRPC mode's
// names its transport after the mode, an HTTP mode's names none.
// An invalid mode's line ends with " invalid=1".
func resultLine(r *modeResult) string {
	if r.SlowStart != nil {
		return strings.Join(ssLines(r), "\n")
	}
	if r.Outage != nil {
		return outageLine(r)
	}
	mode := r.Mode
	if r.grpc() {
		mode += " transport=" + transportGRPC
	}
	line := fmt.Sprintf("RESULT mode=%s requests=%d failed=%d duplicated=%d p99_ms=%.1f max_stop_ms=%.1f crash_failed=%d",
		mode, r.Requests(), r.Failed(), r.Duplicated(), ms(r.Total.P99), r.MaxStopMS(), r.CrashFailed())
	if r.Drain != nil {
		line += drainedCallsFields(r.Drain, r.DrainNames)
	}
	if r.Invalid != "" {
		line += " invalid=1"
	}
	return line
}

// verdict returns why the mode's figures are not what the demo expects,
// or "": graceful must fail and duplicate nothing, naive must show harm,
// the gracekit consumer must never execute an order twice, and no order
// answered OK may be missing from the ledgers.
func verdict(r *modeResult) string {
	var why []string
	if r.Invalid != "" {
		why = append(why, "invalid: "+r.Invalid)
	}
	if r.Drain != nil {
		for i, n := range r.Drain.Calls {
			if n > 0 {
				why = append(why, fmt.Sprintf("the %s consumer sent %d calls to the drained %s more than %v after its drain", r.DrainNames[i], n, r.Drain.ID, drainBound))
			}
		}
	}
	if r.Outage != nil {
		why = append(why, outageProblems(r.Outage)...)
	}
	if (r.Mode == "graceful" || r.Mode == modeMigrate || r.Mode == modeSlowStart || r.Mode == modeOutage) && (r.Failed() > 0 || r.Duplicated() > 0) {
		why = append(why, fmt.Sprintf("%s mode failed %d and duplicated %d of %d requests", r.Mode, r.Failed(), r.Duplicated(), r.Requests()))
	}
	if r.Mode == "naive" && r.Failed()+r.Duplicated() == 0 {
		why = append(why, "naive mode showed no harm (failed=0 duplicated=0)")
	}
	for _, c := range r.Consumers {
		if (c.Name == consumerGracekit || c.Name == consumerSSOn || c.Name == consumerSSOff || r.Mode == modeOutage) && c.Duplicated+c.CrashResent > 0 {
			why = append(why, fmt.Sprintf("the gracekit gateway executed %d orders twice", c.Duplicated+c.CrashResent))
		}
	}
	if n := r.Total.OKNotExecuted; n > 0 {
		why = append(why, fmt.Sprintf("%d orders answered OK are in no provider's ledger", n))
	}
	return strings.Join(why, "; ")
}

// writeTable prints the readable report of a mode.
func writeTable(w io.Writer, r *modeResult) {
	mode := r.Mode
	if r.grpc() {
		mode += " transport=" + transportGRPC
	}
	fmt.Fprintf(w, "=== mode %s: %d requests in %.1fs (%.0f req/s), %d workers over %d consumers, provider latency %v\n",
		mode, r.Requests(), r.Elapsed.Seconds(), drive.Rate(r.Requests(), r.Elapsed), r.Workers, len(r.Consumers), r.Latency)
	if r.Invalid != "" {
		fmt.Fprintf(w, "  INVALID: %s\n", r.Invalid)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  consumer\trequests\tGET\tPOST\tfailed\tfailed_POST\tduplicated\tcrash_failed\tcrash_resent\tretries\tp50_ms\tp99_ms\tmax_ms\t")
	for _, c := range append(slices.Clone(r.Consumers), r.Total) {
		retries := "-"
		if c.Retries != nil {
			var n float64
			for _, v := range c.Retries {
				n += v
			}
			retries = fmt.Sprintf("%.0f", n)
		}
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%.1f\t%.1f\t%.1f\t\n",
			c.Name, c.Requests, c.Requests-c.Posts, c.Posts, c.Failed, c.FailedPost, c.Duplicated,
			c.CrashFailed(), c.CrashResent, retries, ms(c.P50), ms(c.P99), ms(c.Max))
	}
	tw.Flush()
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  provider\tstop_ms\tsource\texit\tflush_acks\tafter_dereg\tin_flight_at_drain\tcut_by_drain\tback_ready_ms\tfailed_during\t")
	var acks, targets, after, cut, failed int
	for _, s := range r.Stops {
		src, flush, afterS, inflight, cutS := "wall", "-", "-", "-", "-"
		if s.Report != nil {
			src = "STOPREPORT"
			flush = fmt.Sprintf("%d/%d", s.Report.FlushAcks, s.Report.FlushTargets)
			afterS = fmt.Sprint(s.Report.AfterDeregistration)
			inflight = fmt.Sprint(s.Report.InFlightAtDrain)
			cutS = fmt.Sprint(s.Report.CutByDrain)
			acks += s.Report.FlushAcks
			targets += s.Report.FlushTargets
			after += s.Report.AfterDeregistration
			cut += s.Report.CutByDrain
		}
		exit := s.Exit
		if s.Killed {
			exit += " (killed)"
		}
		fmt.Fprintf(tw, "  %s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%d\t\n",
			s.ID, s.StopMS(), src, exit, flush, afterS, inflight, cutS, ms(s.BackReady), s.FailedDuring)
		failed += s.FailedDuring
	}
	fmt.Fprintf(tw, "  total\tmax %.1f\t\t\t%d/%d\t%d\t\t%d\t\t%d\t\n", r.MaxStopMS(), acks, targets, after, cut, failed)
	tw.Flush()
	if c := r.Crash; c != nil {
		fmt.Fprintf(w, "  crash: kill -9 %s (%s, exit %s) under load; a crash cannot be drained.\n", c.ID, c.Addr, r.CrashExit)
		fmt.Fprintf(w, "    requests in flight on it that failed with an error: %s\n", byConsumer(r.Consumers, func(c consumerResult) int { return c.CrashInFlight }))
		fmt.Fprintf(w, "    POSTs it had started that were re-sent and ran twice: %s\n", byConsumer(r.Consumers, func(c consumerResult) int { return c.CrashResent }))
		fmt.Fprintf(w, "    requests sent to its dead address afterwards that failed: %s\n", byConsumer(r.Consumers, func(c consumerResult) int { return c.CrashAfter }))
	}
	for _, m := range r.Metrics {
		fmt.Fprintf(w, "  %s\n", m)
	}
	for _, s := range r.Stops {
		if s.ReportErr != "" {
			fmt.Fprintf(w, "  note: %s: %s\n", s.ID, s.ReportErr)
		}
	}
	if len(r.Reasons) > 0 {
		fmt.Fprintln(w, "  failures by consumer and reason:")
		for i, rc := range r.Reasons {
			if i == 6 {
				fmt.Fprintf(w, "    … %d more reasons\n", len(r.Reasons)-6)
				break
			}
			fmt.Fprintf(w, "    %6d  %s\n", rc.Count, rc.Reason)
		}
	}
	fmt.Fprintln(w)
}

// byConsumer formats f of each consumer: "gracekit 1, go-kit 0, cached 3".
func byConsumer(cs []consumerResult, f func(consumerResult) int) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s %d", c.Name, f(c))
	}
	return strings.Join(parts, ", ")
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

// parseCounter sums the samples of the metric name in a Prometheus text
// exposition by the value of their label ("" when they have none). It
// returns nil when there is no such metric.
func parseCounter(r io.Reader, name, label string) map[string]float64 {
	var out map[string]float64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		metric, labels, rest := line, "", ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			metric, rest = line[:i], line[i:]
			if line[i] == '{' {
				j := strings.IndexByte(rest, '}')
				if j < 0 {
					continue
				}
				labels, rest = rest[1:j], rest[j+1:]
			}
		}
		if metric != name {
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
		key := ""
		for _, l := range strings.Split(labels, ",") {
			if k, val, ok := strings.Cut(strings.TrimSpace(l), "="); ok && k == label {
				key = strings.Trim(val, `"`)
			}
		}
		if out == nil {
			out = map[string]float64{}
		}
		out[key] += v
	}
	return out
}

func formatCounts(m map[string]float64) string {
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
