package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// outageFixture is an outage run that showed what it should: both
// gateways from the snapshot, both converged, the late provider ramped.
func outageFixture() *modeResult {
	r := &modeResult{Mode: modeOutage, Transport: transportHTTP, Outage: &outageFigures{
		Gateways: 2, StartedFromSnapshot: 2, Converged: 2, Down: 17100 * time.Millisecond, ConvergeAfter: 4048 * time.Millisecond,
		LateID: "quote-outage-4", LateServed: true, LateRegistered: true,
		Share: lateShare{Ramp: 0.075, After: 0.249, NRamp: 600, NAfter: 500}, Window: 4 * time.Second,
	}}
	r.Total = consumerResult{Name: "total", Requests: 9723, P99: 245400 * time.Microsecond}
	return r
}

func TestOutageResultLine(t *testing.T) {
	r := outageFixture()
	want := "RESULT mode=outage requests=9723 failed=0 duplicated=0 started_from_snapshot=2 gateways=2 converged=2 late_registered=1 ramp_share_pct=7.5 share_pct=24.9 zk_down_s=17.1 converge_ms=4048 p99_ms=245.4"
	if got := resultLine(r); got != want {
		t.Errorf("resultLine:\n%s\nwant\n%s", got, want)
	}
	r.Invalid = "the load reached its bound before ZooKeeper came back"
	if got := resultLine(r); !strings.HasSuffix(got, " invalid=1") {
		t.Errorf("an invalid run's line %q: want invalid=1 at its end", got)
	}
}

func TestOutageVerdict(t *testing.T) {
	tests := []struct {
		name string
		give func(r *modeResult)
		want string // in the verdict; "" for none
	}{
		{"a run that shows static stability passes", func(*modeResult) {}, ""},
		{"one gateway from the snapshot is enough", func(r *modeResult) { r.Outage.StartedFromSnapshot = 1 }, ""},
		{"no gateway from the snapshot fails", func(r *modeResult) { r.Outage.StartedFromSnapshot = 0 },
			"no gateway of 2 started while ZooKeeper was down served from its snapshot"},
		{"a gateway that did not converge fails", func(r *modeResult) { r.Outage.Converged = 1 },
			"1 of 2 gateways converged to the live set"},
		{"a late provider that did not serve fails", func(r *modeResult) { r.Outage.LateServed = false },
			"quote-outage-4, started while ZooKeeper was down, did not serve"},
		{"a late provider never routed to fails", func(r *modeResult) { r.Outage.LateRegistered = false },
			"quote-outage-4 never got traffic through the gateways"},
		{"a late provider at full share at once was not ramped", func(r *modeResult) { r.Outage.Share.Ramp = 0.24 },
			"quote-outage-4 was not ramped in: 24.0% of 600 requests"},
		{"too few requests show no ramp", func(r *modeResult) { r.Outage.Share.NAfter = rampMinRequests - 1 },
			"was not ramped in"},
		{"a failed request fails the run", func(r *modeResult) { r.Total.Failed = 1 },
			"outage mode failed 1 and duplicated 0 of 9723 requests"},
		{"a duplicated order fails the run", func(r *modeResult) {
			r.Total.Duplicated = 1
			r.Consumers = []consumerResult{{Name: consumerFresh, Duplicated: 1}}
		}, "the gracekit gateway executed 1 orders twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := outageFixture()
			tt.give(r)
			got := verdict(r)
			if tt.want == "" {
				if got != "" {
					t.Errorf("verdict %q, want none", got)
				}
				return
			}
			if !strings.Contains(got, tt.want) {
				t.Errorf("verdict %q, want it to say %q", got, tt.want)
			}
		})
	}
}

// The late provider's share is measured from the first request it
// answered: over the first half of the window, and from the window's end
// to the given end; failures and other spans do not count.
func TestLateShares(t *testing.T) {
	t0 := time.Now()
	at := func(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }
	var samples []sample
	add := func(sec float64, instance string, failed bool) {
		samples = append(samples, sample{at: at(sec), latency: 10 * time.Millisecond, instance: instance, failed: failed})
	}
	for i := range 100 {
		add(float64(i)/100, "quote-1", false) // before it answered: not counted
	}
	add(1, "late", false) // its first answer, done at 1.01 s: t0
	for i := range 99 {   // [1.01, 3.01): 1 in 10 its
		id := "quote-1"
		if i%10 == 9 {
			id = "late"
		}
		add(1.02+float64(i)/100, id, false)
	}
	add(2, "", true)     // a failure: not counted
	for i := range 100 { // [3.01, 5.01): the second half of the window: not counted
		add(3.1+float64(i)/100, "late", false)
	}
	for i := range 100 { // [5.01, 7): 1 in 4 its
		id := "quote-2"
		if i%4 == 0 {
			id = "late"
		}
		add(5.1+float64(i)/100, id, false)
	}
	add(7.5, "late", false) // after end: not counted

	got := lateShares(samples, "late", 4*time.Second, at(7))
	want := lateShare{Ramp: 10.0 / 100, After: 25.0 / 100, NRamp: 100, NAfter: 100}
	if got != want {
		t.Errorf("lateShares = %+v, want %+v", got, want)
	}
	if !got.shown() {
		t.Errorf("%+v: want the ramp shown", got)
	}
	if got := lateShares(samples, "never", 4*time.Second, at(7)); got != (lateShare{}) {
		t.Errorf("an instance that never answered: %+v, want zeros", got)
	}
}

func TestSnapshotAge(t *testing.T) {
	text := `# TYPE gracekit_sd_snapshot_age_seconds gauge
gracekit_sd_snapshot_age_seconds{service="quote-outage"} 12.5
gracekit_sd_snapshot_age_seconds{service="gateway-outage"} 0
`
	if age, ok := snapshotAge(text, "quote-outage"); !ok || age != 12.5 {
		t.Errorf("quote-outage: %v, %v; want 12.5, true", age, ok)
	}
	if age, ok := snapshotAge(text, "gateway-outage"); !ok || age != 0 {
		t.Errorf("a live service: %v, %v; want 0, true", age, ok)
	}
	if _, ok := snapshotAge(text, "other"); ok {
		t.Error("a service without the gauge: want ok false")
	}
}

func TestOutageConfigCheck(t *testing.T) {
	good := outageConfig{window: 4 * time.Second, startWait: time.Second, hold: 2 * time.Second, converge: 20 * time.Second}
	if err := good.check(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	tests := []struct {
		name string
		give func(c *outageConfig)
		want string
	}{
		{"a zero window is refused", func(c *outageConfig) { c.window = 0 }, "-outage-window 0s"},
		{"a negative start wait is refused", func(c *outageConfig) { c.startWait = -time.Second }, "-outage-start-wait -1s"},
		{"a zero hold is refused", func(c *outageConfig) { c.hold = 0 }, "-outage-hold 0s"},
		{"a convergence bound under the window is refused", func(c *outageConfig) { c.converge = time.Second },
			"invalid -outage-converge 1s: shorter than -outage-window 4s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.give(&c)
			err := c.check()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("check() = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// The load goes round the gateways in rotation only, as a load balancer
// in front of them does.
func TestLoadPicksGatewaysInRotation(t *testing.T) {
	l := newLoad([]string{"http://a", "http://b", "http://c"}, "k-", 1, 10, time.Second, time.Now().Add(time.Minute))
	defer l.stop()
	for start, want := range []int{0, 1, 2, 0} {
		if got, ok := l.pick(start); !ok || got != want {
			t.Errorf("all in rotation: pick(%d) = %d, %v; want %d", start, got, ok, want)
		}
	}
	l.setActive(1, false)
	if got, ok := l.pick(1); !ok || got != 2 {
		t.Errorf("b out: pick(1) = %d, %v; want 2 (the next in rotation)", got, ok)
	}
	l.setActive(0, false)
	l.setActive(2, false)
	if _, ok := l.pick(0); ok {
		t.Error("none in rotation: want ok false")
	}
	l.setActive(1, true)
	if got, ok := l.pick(2); !ok || got != 1 {
		t.Errorf("only b back: pick(2) = %d, %v; want 1", got, ok)
	}
}

func TestWaitSnapshot(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	err := waitSnapshot(ctx, dir, "quote-outage", 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "no snapshot") || !strings.Contains(err.Error(), "quote-outage.snapshot.json") {
		t.Errorf("without a file: %v, want an error naming the file it looked for", err)
	}
	// Another service's file is not this one's.
	if err := os.WriteFile(filepath.Join(dir, "gracekit-0123456789abcdef-quote.snapshot.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := waitSnapshot(ctx, dir, "quote-outage", 100*time.Millisecond); err == nil {
		t.Error("with only another service's file: want an error")
	}
	if err := os.WriteFile(filepath.Join(dir, "gracekit-0123456789abcdef-quote-outage.snapshot.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := waitSnapshot(ctx, dir, "quote-outage", time.Second); err != nil {
		t.Errorf("with the file: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := waitSnapshot(cctx, t.TempDir(), "quote-outage", time.Minute); err == nil {
		t.Error("a canceled ctx: want its error, not a wait")
	}
}

// The outage panel goes in the last row, its shaded window named as the
// outage in the legend, beside the slowstart's restart windows.
func TestSVGNamesTheOutageWindow(t *testing.T) {
	ss := slowStartFixture()
	r := outageFixture()
	start := time.Now()
	samples := []sample{{at: start, latency: time.Millisecond, consumer: 0}, {at: start.Add(3 * time.Second), latency: time.Millisecond, consumer: 1}}
	r.Timeline = newTimeline(modeOutage, []string{consumerRestarted, consumerFresh}, start, samples, nil, nil)
	r.Timeline.Windows = [][2]time.Duration{{time.Second, 2 * time.Second}}
	r.Timeline.WindowLabel = "ZooKeeper down (outage)"
	path, err := writeChart(filepath.Join(t.TempDir(), "demo.svg"), []*modeResult{r, ss})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	if !strings.Contains(svg, "a ZooKeeper outage") {
		t.Error("the chart's title does not name the outage")
	}
	_, legend, _ := strings.Cut(svg, `class="legend-window"`)
	legend, _, _ = strings.Cut(legend, "</g>")
	for _, want := range []string{"restart window (SIGTERM to ready + settle)", "ZooKeeper down (outage)"} {
		if !strings.Contains(legend, want) {
			t.Errorf("the legend's window item %q does not say %q", legend, want)
		}
	}
}
