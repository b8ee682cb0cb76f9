package main

import (
	"bytes"
	"slices"
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
STOPREPORT {"mode":"graceful","duration_ms":123.4,"flush_targets":2,"flush_acks":2,"after_deregistration":0,"in_flight_at_drain":1}
`
	rep, err := parseStopReport(strings.NewReader(log))
	if err != nil || rep == nil {
		t.Fatalf("parseStopReport = %v, %v", rep, err)
	}
	want := stopReport{Mode: "graceful", DurationMS: 123.4, FlushTargets: 2, FlushAcks: 2, InFlightAtDrain: 1}
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

func sampleResult() *modeResult {
	base := time.Unix(1000, 0)
	var samples []sample
	for i := range 200 {
		s := sample{at: base.Add(time.Duration(i) * time.Millisecond), latency: time.Duration(i+1) * time.Millisecond, post: isPost(int64(i + 1))}
		if i == 150 || i == 160 {
			s.failed, s.reason = true, "HTTP 502: upstream gone"
		}
		samples = append(samples, s)
	}
	r := &modeResult{Mode: "naive", Workers: 20, Gateways: 2, Latency: 50 * time.Millisecond}
	r.summarize(samples, 2*time.Second)
	r.Stops = []stopResult{
		{ID: "quote-1", Report: &stopReport{DurationMS: 12.5}, Wall: 20 * time.Millisecond, Exit: "0"},
		{ID: "quote-2", Wall: 250 * time.Millisecond, Exit: "SIGKILL", Killed: true, ReportErr: "no STOPREPORT line"},
		{ID: "quote-3", Report: &stopReport{DurationMS: 40.25, FlushTargets: 2, FlushAcks: 1, AfterDeregistration: 3}, Exit: "0",
			FailedDuring: failedBetween(samples, base.Add(155*time.Millisecond), base.Add(300*time.Millisecond))},
	}
	return r
}

func TestSummarizeAndResultLine(t *testing.T) {
	r := sampleResult()
	if r.Requests != 200 || r.Posts != 40 || r.Failed != 2 || r.FailedPost != 0 {
		t.Errorf("requests=%d posts=%d failed=%d failedPost=%d", r.Requests, r.Posts, r.Failed, r.FailedPost)
	}
	if r.P50 != 100*time.Millisecond || r.P99 != 198*time.Millisecond || r.Max != 200*time.Millisecond {
		t.Errorf("p50=%v p99=%v max=%v", r.P50, r.P99, r.Max)
	}
	if !slices.Equal(r.Reasons, []reasonCount{{"HTTP 502: upstream gone", 2}}) {
		t.Errorf("reasons %v", r.Reasons)
	}
	// Sample 150 ends at 301ms > 155ms, so it was in flight in the window; so was 160.
	if got := r.Stops[2].FailedDuring; got != 2 {
		t.Errorf("FailedDuring = %d, want 2", got)
	}
	// quote-2 has no report: its wall time counts.
	if got := r.MaxStopMS(); got != 250 {
		t.Errorf("MaxStopMS = %v, want 250", got)
	}
	want := "RESULT mode=naive requests=200 failed=2 p99_ms=198.0 max_stop_ms=250.0"
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

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	writeTable(&b, sampleResult())
	out := b.String()
	for _, want := range []string{
		"=== mode naive: 200 requests in 2.0s (100 req/s)",
		"failed", "p50_ms", "p99_ms", "flush_acks", "after_dereg",
		"quote-1", "12.5", "STOPREPORT",
		"quote-2", "250.0", "wall", "SIGKILL (killed)",
		"1/2", "max 250.0",
		"2  HTTP 502: upstream gone",
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

func TestIsPostIsOneInFive(t *testing.T) {
	n := 0
	for i := int64(1); i <= 5000; i++ {
		if isPost(i) {
			n++
		}
	}
	if n != 1000 {
		t.Errorf("%d POSTs in 5000, want 1000", n)
	}
}

func TestChildEnv(t *testing.T) {
	base := []string{"PATH=/bin", "GRACEKIT_PORT=1", "PROVIDER_LATENCY=1s", "GATEWAY_UPSTREAM=x", "HOME=/h"}
	got := childEnv(base, map[string]string{"GRACEKIT_SERVICE": "quote", "HOME": "/other"})
	want := []string{"PATH=/bin", "GRACEKIT_SERVICE=quote", "HOME=/other"}
	if !slices.Equal(got, want) {
		t.Errorf("childEnv = %v, want %v", got, want)
	}
}

func TestInstanceOf(t *testing.T) {
	if got := instanceOf([]byte(`{"symbol":"ABC","price":12.34,"instance":"quote-1"}`)); got != "quote-1" {
		t.Errorf("instanceOf = %q", got)
	}
	if got := instanceOf([]byte(`not json`)); got != "" {
		t.Errorf("instanceOf(not json) = %q", got)
	}
}

func TestParseRetries(t *testing.T) {
	text := `# HELP gateway_retries_total Attempts beyond the first.
# TYPE gateway_retries_total counter
gateway_retries_total{mode="naive",route="orders"} 12
gateway_retries_total{mode="naive",route="quote"} 40 1700000000000
gateway_requests_total{mode="naive",route="quote"} 4000
other_retries_total 3
`
	got := parseRetries(strings.NewReader(text))
	want := map[string]float64{"orders": 12, "quote": 40, "": 3}
	if len(got) != len(want) {
		t.Fatalf("parseRetries = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("parseRetries[%q] = %v, want %v", k, got[k], v)
		}
	}
	if s := formatRetries(got); s != "all=3 orders=12 quote=40" {
		t.Errorf("formatRetries = %q", s)
	}
	if got := parseRetries(strings.NewReader("up 1\n")); got != nil {
		t.Errorf("without retries: %v, want nil", got)
	}
}
