package main

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0.1, time.Millisecond}} {
		if got := percentile(d, tc.p); got != tc.want {
			t.Errorf("percentile(1..100ms, %v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := percentile(nil, 99); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
	one := []time.Duration{7 * time.Millisecond}
	if got := percentile(one, 50); got != 7*time.Millisecond {
		t.Errorf("percentile of one sample = %v", got)
	}
	// Nearest rank: p99 of 1000 samples is the 990th.
	var k []time.Duration
	for i := 1; i <= 1000; i++ {
		k = append(k, time.Duration(i))
	}
	if got := percentile(k, 99); got != 990 {
		t.Errorf("p99 of 1..1000 = %v, want 990", got)
	}
}

func TestParseStopReport(t *testing.T) {
	log := `{"level":"info","msg":"stopping"}
STOPREPORT {"mode":"graceful","duration_ms":123.4,"flush_targets":2,"flush_acks":2,"after_deregistration":0,"in_flight_at_drain":1,"cut_by_drain":3}
`
	rep, err := parseStopReport(strings.NewReader(log))
	if err != nil || rep == nil {
		t.Fatalf("parseStopReport = %v, %v", rep, err)
	}
	want := stopReport{Mode: "graceful", DurationMS: 123.4, FlushTargets: 2, FlushAcks: 2, InFlightAtDrain: 1, CutByDrain: 3}
	if *rep != want {
		t.Errorf("got %+v, want %+v", *rep, want)
	}

	rep, err = parseStopReport(strings.NewReader("no report here\n"))
	if rep != nil || err != nil {
		t.Errorf("without a line: %v, %v; want nil, nil", rep, err)
	}
	rep, err = parseStopReport(strings.NewReader("STOPREPORT {broken\n"))
	if rep != nil || err == nil {
		t.Errorf("malformed line: %v, %v; want nil and an error", rep, err)
	}
	// The last line wins.
	two := `STOPREPORT {"mode":"naive","duration_ms":1}
STOPREPORT {"mode":"naive","duration_ms":2}`
	if rep, _ := parseStopReport(strings.NewReader(two)); rep == nil || rep.DurationMS != 2 {
		t.Errorf("two lines: %+v, want the last", rep)
	}
}

var consumerNames = []string{consumerGracekit, consumerGoKit, consumerCached}

// sampleResult is a naive run of 300 requests over three consumers (100
// each, 20 POSTs each), with a crash of quote-2 at 250 ms:
//   - go-kit: POST 5 failed (HTTP 502) mid-run; POST 10 ran twice on
//     quote-1.run1 and quote-3.run1 (a duplicate); POST 15 was in flight on
//     the crashed quote-2.run2 and re-sent to quote-1.run2;
//   - gracekit: POST 250 was in flight on quote-2 when it was killed and
//     failed, naming it as upstream;
//   - cached: POST 285 was sent to quote-2's dead address after the kill
//     and failed; POST 290 was answered OK but is in no ledger.
func sampleResult() *modeResult {
	base := time.Unix(1000, 0)
	crashAddr := "127.0.0.1:4002"
	crash := &crashInfo{ID: "quote-2", Proc: "quote-2.run2", Addr: crashAddr, At: base.Add(250 * time.Millisecond)}
	led := ledger{}
	var samples []sample
	for i := range 300 {
		n := int64(i + 1)
		s := sample{at: base.Add(time.Duration(i) * time.Millisecond), latency: time.Duration(i%100+1) * time.Millisecond,
			post: isPost(n), consumer: i % 3}
		if s.post {
			s.key = "k" + strconv.Itoa(int(n))
			led[s.key] = []string{"quote-1.run1"}
		}
		samples = append(samples, s)
	}
	set := func(n int, f func(s *sample)) { f(&samples[n-1]) }
	set(5, func(s *sample) {
		s.consumer = 1
		s.failed, s.reason = true, "HTTP 502: upstream gone"
		delete(led, s.key)
	})
	set(10, func(s *sample) { s.consumer = 1; led[s.key] = []string{"quote-1.run1", "quote-3.run1"} })
	set(15, func(s *sample) { s.consumer = 1; led[s.key] = []string{"quote-2.run2", "quote-1.run2"} })
	set(250, func(s *sample) {
		s.consumer = 0
		s.at, s.latency = crash.At.Add(-10*time.Millisecond), 20*time.Millisecond
		s.failed, s.reason, s.upstream = true, "HTTP 502: endpoint: call failed (non-idempotent request may have been sent)", crashAddr
		led[s.key] = []string{"quote-2.run2"}
	})
	set(285, func(s *sample) {
		s.consumer = 2
		s.failed, s.reason, s.upstream = true, "HTTP 502: call 127.0.0.1:4002: connection refused", crashAddr
		delete(led, s.key)
	})
	set(290, func(s *sample) { s.consumer = 2; delete(led, s.key) })
	r := &modeResult{Mode: "naive", Workers: 21, Latency: 50 * time.Millisecond}
	r.summarize(samples, 3*time.Second, consumerNames, led, crash)
	r.CrashExit = "SIGKILL"
	r.Stops = []stopResult{
		{ID: "quote-1", Report: &stopReport{DurationMS: 12.5}, Wall: 20 * time.Millisecond, Exit: "0"},
		{ID: "quote-2", Wall: 250 * time.Millisecond, Exit: "SIGKILL", Killed: true, ReportErr: "no STOPREPORT line"},
		{ID: "quote-3", Report: &stopReport{DurationMS: 40.25, FlushTargets: 2, FlushAcks: 1, AfterDeregistration: 3, CutByDrain: 1}, Exit: "0",
			FailedDuring: failedBetween(samples, base, base.Add(10*time.Millisecond))},
	}
	return r
}

func TestSummarizeAndResultLine(t *testing.T) {
	r := sampleResult()
	if r.Requests() != 300 || r.Total.Posts != 60 {
		t.Errorf("requests=%d posts=%d, want 300 and 60", r.Requests(), r.Total.Posts)
	}
	gk, kit, cached := r.Consumers[0], r.Consumers[1], r.Consumers[2]
	if gk.Failed != 0 || gk.CrashInFlight != 1 || gk.CrashAfter != 0 || gk.Duplicated != 0 || gk.CrashResent != 0 {
		t.Errorf("gracekit: %+v; want only one crash in-flight failure", gk)
	}
	if kit.Failed != 1 || kit.FailedPost != 1 || kit.Duplicated != 1 || kit.CrashResent != 1 || kit.CrashFailed() != 0 {
		t.Errorf("go-kit: %+v; want 1 failed, 1 duplicated, 1 crash re-sent", kit)
	}
	if cached.Failed != 0 || cached.CrashAfter != 1 || cached.OKNotExecuted != 1 {
		t.Errorf("cached: %+v; want 1 crash failure after the kill and 1 OK not executed", cached)
	}
	if r.Failed() != 1 || r.Duplicated() != 1 || r.CrashFailed() != 2 || r.Total.CrashResent != 1 || r.Total.OKNotExecuted != 1 {
		t.Errorf("totals: %+v", r.Total)
	}
	if !slices.Equal(r.Reasons, []reasonCount{{"go-kit: HTTP 502: upstream gone", 1}}) {
		t.Errorf("reasons %v", r.Reasons)
	}
	// quote-2 has no report: its wall time counts.
	if got := r.MaxStopMS(); got != 250 {
		t.Errorf("MaxStopMS = %v, want 250", got)
	}
	want := fmt.Sprintf("RESULT mode=naive requests=300 failed=1 duplicated=1 p99_ms=%.1f max_stop_ms=250.0 crash_failed=2", ms(r.Total.P99))
	if got := resultLine(r); got != want {
		t.Errorf("resultLine:\n got %s\nwant %s", got, want)
	}
	r.Invalid = "the load reached its bound before quote-3 was stopped"
	if got := resultLine(r); got != want+" invalid=1" {
		t.Errorf("resultLine of an invalid mode:\n got %s\nwant %s invalid=1", got, want)
	}
	var b bytes.Buffer
	writeTable(&b, r)
	if !strings.Contains(b.String(), "INVALID: the load reached its bound before quote-3 was stopped") {
		t.Errorf("the table does not say the mode is invalid:\n%s", b.String())
	}
}

func TestSummarizeKeepsFailuresBeforeTheCrash(t *testing.T) {
	base := time.Unix(1000, 0)
	crash := &crashInfo{ID: "quote-2", Proc: "quote-2.run1", Addr: "127.0.0.1:4002", At: base.Add(time.Second)}
	samples := []sample{
		// Ended before the kill: not the crash's doing, even at its address.
		{at: base, latency: 10 * time.Millisecond, post: true, key: "a", failed: true, reason: "x", upstream: crash.Addr},
		// Named no upstream: failed.
		{at: base.Add(2 * time.Second), latency: time.Millisecond, failed: true, reason: "y"},
		// Another address: failed.
		{at: base.Add(2 * time.Second), latency: time.Millisecond, post: true, key: "b", failed: true, reason: "z", upstream: "127.0.0.1:4001"},
	}
	r := &modeResult{Mode: "graceful"}
	r.summarize(samples, time.Second, []string{consumerGracekit}, ledger{}, crash)
	if r.Failed() != 3 || r.CrashFailed() != 0 {
		t.Errorf("failed=%d crash_failed=%d, want 3 and 0", r.Failed(), r.CrashFailed())
	}
}

func TestVerdict(t *testing.T) {
	tests := []struct {
		give string
		r    modeResult
		want string // a part of the verdict; "" for none
	}{
		{"graceful without harm passes", modeResult{Mode: "graceful", Total: consumerResult{CrashInFlight: 2}}, ""},
		{"graceful with a failure fails", modeResult{Mode: "graceful", Total: consumerResult{Failed: 1}}, "graceful mode failed 1"},
		{"graceful with a duplicate fails", modeResult{Mode: "graceful", Total: consumerResult{Duplicated: 1}}, "duplicated 1"},
		{"naive with harm passes", modeResult{Mode: "naive", Total: consumerResult{Duplicated: 1}}, ""},
		{"naive without harm fails", modeResult{Mode: "naive", Total: consumerResult{CrashInFlight: 3}}, "no harm"},
		{"a gracekit duplicate fails", modeResult{Mode: "naive", Total: consumerResult{Failed: 1},
			Consumers: []consumerResult{{Name: consumerGracekit, CrashResent: 1}}}, "gracekit gateway executed 1"},
		{"an OK order missing from the ledgers fails", modeResult{Mode: "naive", Total: consumerResult{Failed: 1, OKNotExecuted: 2}}, "2 orders answered OK"},
		{"an invalid mode fails", modeResult{Mode: "naive", Total: consumerResult{Failed: 1}, Invalid: "no load"}, "invalid: no load"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got := verdict(&tt.r)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("verdict = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	writeTable(&b, sampleResult())
	out := b.String()
	for _, want := range []string{
		"=== mode naive: 300 requests in 3.0s (100 req/s), 21 workers over 3 consumers",
		"consumer", "failed_POST", "duplicated", "crash_failed", "crash_resent", "p99_ms",
		"gracekit", "go-kit", "cached", "total",
		"flush_acks", "after_dereg", "cut_by_drain",
		"quote-1", "12.5", "STOPREPORT",
		"quote-2", "250.0", "wall", "SIGKILL (killed)",
		"1/2", "max 250.0",
		"crash: kill -9 quote-2 (127.0.0.1:4002, exit SIGKILL)",
		"requests in flight on it that failed with an error: gracekit 1, go-kit 0, cached 0",
		"re-sent and ran twice: gracekit 0, go-kit 1, cached 0",
		"dead address afterwards that failed: gracekit 0, go-kit 0, cached 1",
		"1  go-kit: HTTP 502: upstream gone",
		"note: quote-2: no STOPREPORT line",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "RESULT") {
		t.Errorf("the table must not contain the RESULT line:\n%s", out)
	}
}

func TestReadLedgers(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "quote-1.run1.keys"), []byte("a\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "quote-2.run1.keys"), []byte("b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "quote-1.run1.log"), []byte("c\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	led, err := readLedgers(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(led) != 2 || !slices.Equal(led["a"], []string{"quote-1.run1"}) || !slices.Equal(led["b"], []string{"quote-1.run1", "quote-2.run1"}) {
		t.Errorf("readLedgers = %v", led)
	}
}

func TestParseCounter(t *testing.T) {
	text := `# HELP gateway_retries_total Attempts beyond the first.
# TYPE gateway_retries_total counter
gateway_retries_total{mode="naive",route="orders"} 12
gateway_retries_total{mode="naive",route="quote"} 40 1700000000000
gateway_requests_total{mode="naive",route="quote"} 4000
gracekit_endpoint_retries_total{reason="not-sent",route="quote"} 3
gracekit_endpoint_retries_total{reason="not-sent",route="orders"} 2
`
	got := parseCounter(strings.NewReader(text), "gateway_retries_total", "route")
	want := map[string]float64{"orders": 12, "quote": 40}
	if !maps.Equal(got, want) {
		t.Errorf("parseCounter = %v, want %v", got, want)
	}
	if got := parseCounter(strings.NewReader(text), "gracekit_endpoint_retries_total", "reason"); !maps.Equal(got, map[string]float64{"not-sent": 5}) {
		t.Errorf("by reason = %v", got)
	}
	if s := formatCounts(map[string]float64{"": 3, "orders": 12, "quote": 40}); s != "all=3 orders=12 quote=40" {
		t.Errorf("formatCounts = %q", s)
	}
	if got := parseCounter(strings.NewReader("up 1\n"), "gateway_retries_total", "route"); got != nil {
		t.Errorf("without retries: %v, want nil", got)
	}
}
