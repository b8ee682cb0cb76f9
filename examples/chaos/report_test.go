package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestPhaseOf(t *testing.T) {
	phases := []*phase{{start: at(0)}, {start: at(1000)}, {start: at(2000)}}
	tests := []struct {
		give int
		want int
	}{{-1, -1}, {0, 0}, {999, 0}, {1000, 1}, {1500, 1}, {2000, 2}, {9000, 2}}
	for _, tt := range tests {
		if got := phaseOf(phases, at(tt.give)); got != tt.want {
			t.Errorf("phaseOf(%dms) = %d, want %d", tt.give, got, tt.want)
		}
	}
}

func TestIsCrashFailure(t *testing.T) {
	ph := &phase{killAt: at(1000), killedAddr: "127.0.0.1:4000"}
	onKilled := "HTTP 502: {\"error\":\"endpoint: call failed: attempt 1 on http://127.0.0.1:4000: EOF\"}"
	tests := []struct {
		name string
		give sample
		want bool
	}{
		{"a POST in flight on the killed provider", sample{post: true, failed: true, at: at(900), done: at(1100), reason: onKilled}, true},
		{"a GET in flight is never the crash's", sample{failed: true, at: at(900), done: at(1100), reason: onKilled}, false},
		{"a POST sent after the kill", sample{post: true, failed: true, at: at(1001), done: at(1100), reason: onKilled}, false},
		{"a POST done before the kill", sample{post: true, failed: true, at: at(800), done: at(999), reason: onKilled}, false},
		{"a POST that failed on another provider", sample{post: true, failed: true, at: at(900), done: at(1100), reason: "attempt 1 on http://127.0.0.1:4001: EOF"}, false},
		{"a POST that succeeded", sample{post: true, at: at(900), done: at(1100)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isCrashFailure(tt.give, ph); got != tt.want {
				t.Errorf("isCrashFailure = %v, want %v", got, tt.want)
			}
		})
	}
	if isCrashFailure(sample{post: true, failed: true, at: at(900), done: at(1100), reason: onKilled}, &phase{}) {
		t.Error("a phase without a kill has no crash failures")
	}
}

func TestRecovery(t *testing.T) {
	ph := &phase{end: at(1000), routeAfter: map[string]time.Time{"quote-1": at(1000), "quote-2": at(1200)}}
	ok := func(gw int, id string, sent, done int) sample {
		return sample{gateway: gw, instance: id, at: at(sent), done: at(done)}
	}
	samples := []sample{
		ok(0, "quote-1", 900, 1050),  // sent before the end: does not count
		ok(0, "quote-1", 1010, 1060), // gateway 0, quote-1 at 1060
		ok(1, "quote-1", 1020, 1070), // gateway 1, quote-1 at 1070
		ok(0, "quote-2", 1100, 1150), // sent before quote-2 registered again
		ok(0, "quote-2", 1300, 1400), // gateway 0, quote-2 at 1400
		ok(1, "quote-2", 1250, 1500), // gateway 1, quote-2 at 1500
		ok(1, "quote-2", 1260, 1450), // ... or 1450, the first answer
		{gateway: 1, instance: "", failed: true, at: at(1300), done: at(1350)},
	}
	if got, want := recovery(ph, samples, 2), 450*time.Millisecond; got != want {
		t.Errorf("recovery = %v, want %v", got, want)
	}
	if got := recovery(ph, samples[:5], 2); got != -1 {
		t.Errorf("recovery without gateway 1 routing to quote-2 = %v, want -1", got)
	}
}

func TestSummarizeCountsEachPhase(t *testing.T) {
	phases := []*phase{
		{name: "leader", start: at(0), end: at(500), mustNotFlap: true, flapped: []string{"quote-2"}},
		{name: "kill", start: at(1000), end: at(1500), killAt: at(1200), killedAddr: "127.0.0.1:4000"},
	}
	samples := []sample{
		{n: 1, at: at(100), done: at(150), gateway: 0, instance: "quote-1"},
		{n: 5, at: at(200), done: at(250), gateway: 1, post: true, key: "k5", instance: "quote-2"},
		{n: 6, at: at(300), done: at(350), gateway: 0, failed: true, reason: "timeout"},
		{n: 10, at: at(1100), done: at(1300), gateway: 0, post: true, key: "k10", failed: true, reason: "attempt 1 on 127.0.0.1:4000: EOF"},
		{n: 15, at: at(1250), done: at(1300), gateway: 1, post: true, key: "k15", instance: "quote-1"},
		{n: 20, at: at(1260), done: at(1300), gateway: 0, post: true, key: "k20", instance: "quote-1"},
	}
	lg := &ledger{counts: map[string]int{"k5": 1, "k10": 1, "k15": 2}}
	rs := summarize(phases, samples, lg, 2, at(2000))
	want := []faultResult{
		{Name: "leader", Requests: 3, Failed: 1, Duplicated: 0, Duration: time.Second},
		{Name: "kill", Requests: 3, Failed: 0, CrashFailed: 1, Duplicated: 1, Lost: 1, Duration: time.Second},
	}
	for i, w := range want {
		r := rs[i]
		if r.Name != w.Name || r.Requests != w.Requests || r.Failed != w.Failed || r.CrashFailed != w.CrashFailed ||
			r.Duplicated != w.Duplicated || r.Lost != w.Lost || r.Duration != w.Duration {
			t.Errorf("phase %d = %+v, want %+v", i, r, w)
		}
	}
	if got, want := resultLine(rs), "RESULT mode=chaos requests=6 failed=1 duplicated=1 crash_failed=1"; got != want {
		t.Errorf("resultLine = %q, want %q", got, want)
	}
	rs[0].Recovered = 1234 * time.Millisecond
	if got, want := chaosLine(rs[0]), "CHAOS fault=leader requests=3 failed=1 duplicated=0 recovered_ms=1234"; got != want {
		t.Errorf("chaosLine = %q, want %q", got, want)
	}
	if got, want := chaosLine(rs[1]), "CHAOS fault=kill requests=3 failed=0 duplicated=1 recovered_ms=-1"; got != want {
		t.Errorf("chaosLine = %q, want %q", got, want)
	}

	probs := strings.Join(problems(rs, 1), "\n")
	for _, want := range []string{"leader: 1 requests failed", "kill: 1 orders executed more than once", "kill: 1 orders answered OK that no provider executed",
		"leader: provider nodes deleted and re-created: quote-2", "kill: the gateways never routed"} {
		if !strings.Contains(probs, want) {
			t.Errorf("problems lack %q:\n%s", want, probs)
		}
	}
	if strings.Contains(probs, "requests/s") {
		t.Errorf("3 requests/s is above a minimum of 1:\n%s", probs)
	}
	if probs := strings.Join(problems(rs, 200), "\n"); !strings.Contains(probs, "averaged 3 requests/s, below 200") {
		t.Errorf("problems lack the low rate:\n%s", probs)
	}
}

func TestSummarizeWithoutLedgerCountsNoDuplicates(t *testing.T) {
	phases := []*phase{{name: "kill", start: at(0)}}
	samples := []sample{{n: 5, at: at(10), done: at(20), post: true, key: "k5", instance: "quote-1"}}
	rs := summarize(phases, samples, nil, 1, at(100))
	if rs[0].Duplicated != 0 || rs[0].Lost != 0 {
		t.Errorf("without a ledger: %+v, want no duplicate and nothing lost", rs[0])
	}
}

func TestProblemsAllowsFlapsOutsideTheLeaderKill(t *testing.T) {
	rs := []faultResult{{Name: "session", Requests: 1000, Duration: time.Second, Flapped: []string{"quote-1"}}}
	if probs := problems(rs, 200); len(probs) != 0 {
		t.Errorf("problems = %v, want none", probs)
	}
}

func TestReadLedgers(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.ledger")
	b := filepath.Join(dir, "b.ledger")
	if err := os.WriteFile(a, []byte("k1\nk2\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("k2\r\nk3"), 0o644); err != nil {
		t.Fatal(err)
	}
	lg, err := readLedgers([]string{a, b, filepath.Join(dir, "missing.ledger")})
	if err != nil {
		t.Fatal(err)
	}
	if lg.files != 2 || lg.lines != 4 || lg.counts["k1"] != 1 || lg.counts["k2"] != 2 || lg.counts["k3"] != 1 {
		t.Errorf("readLedgers = %+v", lg)
	}
}

func TestChanged(t *testing.T) {
	ids := []string{"quote-1", "quote-2", "quote-3"}
	before := map[string]int64{"quote-1": 10, "quote-2": 11, "quote-3": 12}
	after := map[string]int64{"quote-1": 10, "quote-2": 20, "quote-3": 0}
	if got, want := changed(ids, before, after), []string{"quote-2", "quote-3"}; !equal(got, want) {
		t.Errorf("changed = %v, want %v", got, want)
	}
}
