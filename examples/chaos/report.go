package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gracekit/gracekit/examples/internal/drive"
)

// phase is one fault with the load that ran through it: from start (a
// pre-roll of steady load, then the fault) to the start of the next phase.
type phase struct {
	name  string
	start time.Time // the phase's first request may be sent from here
	end   time.Time // the fault ended: recovery is measured from here

	// routeAfter names the providers that must be routed to again, each
	// with the time after which a request must have been sent to count:
	// end, or later for a provider that had to register again first.
	routeAfter map[string]time.Time

	// The crash: POSTs in flight from killAt (the SIGKILL) to deadAt (its
	// exit, as the driver saw it; killAt when unknown) whose error names
	// killedAddr are the crash's, not failures: one sent between the two
	// may have reached the provider before it died.
	killAt     time.Time
	deadAt     time.Time
	killedAddr string

	recovered time.Time // when the driver saw every provider routed to again

	mustNotFlap bool     // a provider node deleted and re-created fails the run
	flapped     []string // provider nodes whose czxid changed, or that went, in the fault
	note        string
	err         error // the fault could not be run or did not recover
}

// faultResult is what a phase's requests and the providers' ledgers show.
type faultResult struct {
	Transport    string // "grpc", or "" or "http" for HTTP
	Name         string
	Requests     int
	Failed       int // failures outside the crash's in-flight POSTs
	CrashFailed  int
	Duplicated   int // POSTs whose key the providers executed more than once
	Lost         int // POSTs answered OK whose key no provider executed
	Recovered    time.Duration
	Duration     time.Duration
	Flapped      []string
	MustNotFlap  bool
	Note         string
	Err          string
	Reasons      map[string]int // failure reason -> count
	CrashReasons map[string]int // the crash's failures: reason -> count
}

// ledger is the providers' record of executed orders: key -> times.
type ledger struct {
	counts map[string]int
	lines  int
	files  int // ledger files found
}

// readLedgers reads every provider ledger (drive.ReadLedgers); a file that
// does not exist counts as empty.
func readLedgers(paths []string) (ledger, error) {
	lg := ledger{counts: map[string]int{}}
	dl, err := drive.ReadLedgers(paths...)
	if err != nil {
		return lg, err
	}
	for key, execs := range dl.Execs {
		lg.counts[key] = len(execs)
	}
	lg.lines, lg.files = dl.Lines, dl.Files
	return lg, nil
}

// phaseOf returns the index of the phase a request sent at t belongs to:
// the last one started at or before t; -1 before the first.
func phaseOf(phases []*phase, t time.Time) int {
	i, _ := slices.BinarySearchFunc(phases, t, func(p *phase, t time.Time) int {
		if p.start.After(t) {
			return 1
		}
		return -1
	})
	return i - 1
}

// isCrashFailure tells whether s is a POST that was in flight on the
// provider killed in ph, and failed because of it. Through a gateway that
// retries nothing (s.noRetry: plain grpc-go), any request that failed at
// the killed address once it was killed is the crash's, as in the demo:
// in flight on it, or sent before the client saw the connection die.
func isCrashFailure(s sample, ph *phase) bool {
	if ph.killedAddr == "" || !s.failed || !s.done.After(ph.killAt) || !strings.Contains(s.reason, ph.killedAddr) {
		return false
	}
	dead := ph.deadAt
	if dead.Before(ph.killAt) {
		dead = ph.killAt
	}
	return s.noRetry || (s.post && !s.at.After(dead))
}

// recovery is the time from ph.end until every gateway has answered with
// every provider of ph.routeAfter, for a request sent after its time; -1
// when some gateway never did.
func recovery(ph *phase, samples []sample, gateways int) time.Duration {
	if len(ph.routeAfter) == 0 || ph.end.IsZero() {
		return -1
	}
	var worst time.Time
	for gw := range gateways {
		for id, after := range ph.routeAfter {
			var first time.Time
			for _, s := range samples {
				if s.gateway == gw && !s.failed && s.instance == id && s.at.After(after) &&
					(first.IsZero() || s.done.Before(first)) {
					first = s.done
				}
			}
			if first.IsZero() {
				return -1
			}
			if first.After(worst) {
				worst = first
			}
		}
	}
	return max(worst.Sub(ph.end), 0)
}

// summarize counts each phase's requests. lg is nil when the providers
// keep no ledger: duplicates are then not counted.
func summarize(phases []*phase, samples []sample, lg *ledger, gateways int, loadEnd time.Time) []faultResult {
	res := make([]faultResult, len(phases))
	for i, ph := range phases {
		to := loadEnd
		if i+1 < len(phases) {
			to = phases[i+1].start
		}
		res[i] = faultResult{Name: ph.name, Flapped: ph.flapped, MustNotFlap: ph.mustNotFlap, Note: ph.note,
			Duration: to.Sub(ph.start), Reasons: map[string]int{}, CrashReasons: map[string]int{}}
		if ph.err != nil {
			res[i].Err = ph.err.Error()
		}
	}
	for _, s := range samples {
		i := max(phaseOf(phases, s.at), 0)
		r, ph := &res[i], phases[i]
		r.Requests++
		switch {
		case isCrashFailure(s, ph):
			r.CrashFailed++
			r.CrashReasons[reasonClass(s)]++
		case s.failed:
			r.Failed++
			r.Reasons[reasonClass(s)]++
		}
		if s.post && lg != nil {
			switch n := lg.counts[s.key]; {
			case n > 1:
				r.Duplicated++
			case n == 0 && !s.failed:
				r.Lost++
			}
		}
	}
	for i, ph := range phases {
		res[i].Recovered = recovery(ph, samples, gateways)
	}
	return res
}

// reasonClass is a failure's reason, short, with its method.
func reasonClass(s sample) string {
	m := "GET"
	if s.post {
		m = "POST"
	}
	return m + " " + drive.Shorten(s.reason, 240)
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*10) / 10 }

// recoveredMS formats a recovery time in milliseconds; -1 when it never
// recovered.
func recoveredMS(d time.Duration) string {
	if d < 0 {
		return "-1"
	}
	return fmt.Sprintf("%.0f", ms(d))
}

// transportField is " transport=grpc" for a gRPC result, "" for HTTP,
// whose lines name no transport, as before gRPC.
func transportField(transport string) string {
	if transport == "grpc" {
		return " transport=grpc"
	}
	return ""
}

// chaosLine is the machine-readable line of one fault.
func chaosLine(r faultResult) string {
	return fmt.Sprintf("CHAOS%s fault=%s requests=%d failed=%d duplicated=%d recovered_ms=%s",
		transportField(r.Transport), r.Name, r.Requests, r.Failed, r.Duplicated, recoveredMS(r.Recovered))
}

// totals adds up the faults.
func totals(rs []faultResult) (t faultResult) {
	t.Name = "total"
	for _, r := range rs {
		t.Requests += r.Requests
		t.Failed += r.Failed
		t.CrashFailed += r.CrashFailed
		t.Duplicated += r.Duplicated
		t.Lost += r.Lost
		t.Duration += r.Duration
	}
	return t
}

// resultLine is the last line of a group's run (its faults are all of
// one transport).
func resultLine(rs []faultResult) string {
	t := totals(rs)
	tr := ""
	if len(rs) > 0 {
		tr = transportField(rs[0].Transport)
	}
	return fmt.Sprintf("RESULT mode=chaos%s requests=%d failed=%d duplicated=%d crash_failed=%d",
		tr, t.Requests, t.Failed, t.Duplicated, t.CrashFailed)
}

// problems lists why the run fails: failures outside the crash, duplicates,
// orders answered OK but never executed,
// a flap where none is allowed, a fault that did not run or recover, a
// load below minRate requests per second.
func problems(rs []faultResult, minRate float64) []string {
	var out []string
	for _, r := range rs {
		if r.Err != "" {
			out = append(out, fmt.Sprintf("%s: %s", r.Name, r.Err))
		}
		if r.Failed > 0 {
			out = append(out, fmt.Sprintf("%s: %d requests failed", r.Name, r.Failed))
		}
		if r.Duplicated > 0 {
			out = append(out, fmt.Sprintf("%s: %d orders executed more than once", r.Name, r.Duplicated))
		}
		if r.Lost > 0 {
			out = append(out, fmt.Sprintf("%s: %d orders answered OK that no provider executed", r.Name, r.Lost))
		}
		if r.MustNotFlap && len(r.Flapped) > 0 {
			out = append(out, fmt.Sprintf("%s: provider nodes deleted and re-created: %s", r.Name, strings.Join(r.Flapped, ", ")))
		}
		if r.Err == "" && r.Recovered < 0 {
			out = append(out, fmt.Sprintf("%s: the gateways never routed to every live provider again", r.Name))
		}
	}
	if t := totals(rs); t.Duration > 0 {
		if rate := float64(t.Requests) / t.Duration.Seconds(); rate < minRate {
			out = append(out, fmt.Sprintf("the load averaged %.0f requests/s, below %.0f: the faults were not run under the load asked for", rate, minRate))
		}
	}
	return out
}

// writeTable prints the faults side by side, then each fault's failure
// reasons.
func writeTable(w io.Writer, rs []faultResult, ledgerNote string) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault\trequests\treq/s\tfailed\tcrash_failed\tduplicated\tlost\trecovered_ms\trecreated\t")
	row := func(r faultResult, recovered, recreated string) {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%d\t%d\t%d\t%d\t%s\t%s\t\n", r.Name, r.Requests, drive.Rate(r.Requests, r.Duration), r.Failed, r.CrashFailed,
			r.Duplicated, r.Lost, recovered, recreated)
	}
	for _, r := range rs {
		recreated := "-"
		if len(r.Flapped) > 0 {
			recreated = strings.Join(r.Flapped, ",")
		}
		row(r, recoveredMS(r.Recovered), recreated)
	}
	row(totals(rs), "", "")
	tw.Flush()
	for _, r := range rs {
		if r.Note != "" {
			fmt.Fprintf(w, "  %s: %s\n", r.Name, r.Note)
		}
	}
	if ledgerNote != "" {
		fmt.Fprintf(w, "  duplicates: %s\n", ledgerNote)
	}
	for _, r := range rs {
		writeReasons(w, r.Name+" failures", r.Reasons)
		writeReasons(w, r.Name+" crash_failed (in flight on the killed provider)", r.CrashReasons)
	}
	fmt.Fprintln(w)
}

// writeReasons prints the most frequent reasons, most frequent first.
func writeReasons(w io.Writer, title string, reasons map[string]int) {
	if len(reasons) == 0 {
		return
	}
	list := drive.RankReasons(reasons)
	fmt.Fprintf(w, "  %s:\n", title)
	for i, e := range list {
		if i == 5 {
			fmt.Fprintf(w, "    ... %d more reasons\n", len(list)-5)
			break
		}
		fmt.Fprintf(w, "    %5d × %s\n", e.Count, e.Reason)
	}
}
