package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/gracekit/gracekit/examples/internal/drive"
)

// The slowstart mode: two groups of 3 cold-starting providers
// (examples/provider -warmup), each behind a gracekit gateway of its own,
// one with slow start on and one with GRACEKIT_SLOW_START=off, each under
// its own load (so a stalled consumer does not slow the other's). Provider
// i of both groups is restarted at once, then the driver waits
// ssSettle; the p99 latency of the requests sent from each SIGTERM until
// ssSettle after the new process is ready is set against the p99 of the
// requests sent outside every such window (before the first restart and
// after the last window).
const (
	modeSlowStart = "slowstart"

	ssProviderOn  = "quote-ss-on"
	ssProviderOff = "quote-ss-off"
	ssGatewayOn   = "gateway-ss-on"
	ssGatewayOff  = "gateway-ss-off"

	consumerSSOn  = "slowstart-on"
	consumerSSOff = "slowstart-off"
)

// ssConfig is the slowstart mode's shape (flags -ss-*).
type ssConfig struct {
	warmup      time.Duration // the providers' -warmup
	warmupDelay time.Duration // their -warmup-delay
	window      time.Duration // GRACEKIT_SLOW_START_WINDOW of the "on" gateway
	workers     int           // load workers per gateway
	settle      time.Duration // after each restart's ready: its window's end and the next SIGTERM
	steady      time.Duration // load before the first restart and after the last window
}

// ssFigures is one consumer's slowstart figures.
type ssFigures struct {
	Name       string
	On         bool // slow start on
	Requests   int
	Failed     int
	Duplicated int
	P99Restart time.Duration
	P99Steady  time.Duration
	NRestart   int // requests in the restart windows
	NSteady    int
}

// Ratio is the restart p99 over the steady p99 (0 when there is no
// steady figure).
func (f ssFigures) Ratio() float64 {
	if f.P99Steady <= 0 {
		return 0
	}
	return float64(f.P99Restart) / float64(f.P99Steady)
}

// span is a window of time, [from, to).
type span struct{ from, to time.Time }

// windowP99 is one consumer's p99 latency inside and outside the windows.
type windowP99 struct {
	Restart, Steady   time.Duration
	NRestart, NSteady int
}

// p99ByWindow splits each consumer's samples (0 <= consumer < consumers)
// by their send time into those inside any window and those outside all
// of them, and returns each part's nearest-rank p99. Failed requests
// count too: a slow failure is a slow answer.
func p99ByWindow(samples []sample, consumers int, windows []span) []windowP99 {
	in := make([][]time.Duration, consumers)
	out := make([][]time.Duration, consumers)
	for _, s := range samples {
		if s.consumer < 0 || s.consumer >= consumers {
			continue
		}
		inside := false
		for _, w := range windows {
			if !s.at.Before(w.from) && s.at.Before(w.to) {
				inside = true
				break
			}
		}
		if inside {
			in[s.consumer] = append(in[s.consumer], s.latency)
		} else {
			out[s.consumer] = append(out[s.consumer], s.latency)
		}
	}
	res := make([]windowP99, consumers)
	for c := range res {
		slices.Sort(in[c])
		slices.Sort(out[c])
		res[c] = windowP99{Restart: percentile(in[c], 99), Steady: percentile(out[c], 99), NRestart: len(in[c]), NSteady: len(out[c])}
	}
	return res
}

// ssLines are the slowstart mode's RESULT lines, one per consumer.
func ssLines(r *modeResult) []string {
	var lines []string
	for _, f := range r.SlowStart {
		on := "off"
		if f.On {
			on = "on"
		}
		line := fmt.Sprintf("RESULT mode=%s slow_start=%s requests=%d failed=%d duplicated=%d p99_restart_ms=%.1f p99_steady_ms=%.1f restart_window_s=%g",
			modeSlowStart, on, f.Requests, f.Failed, f.Duplicated, ms(f.P99Restart), ms(f.P99Steady), r.SSWindow.Seconds())
		if r.Invalid != "" {
			line += " invalid=1"
		}
		lines = append(lines, line)
	}
	return lines
}

// ssNotes says where the mode's latency figures miss the targets
// (with slow start at most 1.5x steady, without at least 3x). A shared
// machine's noise can move a p99, so these are notes, not failures.
func ssNotes(r *modeResult) []string {
	var notes []string
	for _, f := range r.SlowStart {
		switch {
		case f.On && f.Ratio() > 1.5:
			notes = append(notes, fmt.Sprintf("with slow start the restart p99 is %.1fx the steady p99 (want at most 1.5x)", f.Ratio()))
		case !f.On && f.Ratio() < 3:
			notes = append(notes, fmt.Sprintf("without slow start the restart p99 is only %.1fx the steady p99 (the spike should be at least 3x)", f.Ratio()))
		}
	}
	return notes
}

// runSlowStart runs the slowstart mode over HTTP.
func (d *driver) runSlowStart(ctx context.Context, base string) (res *modeResult, err error) {
	cfg, ss := d.cfg, d.cfg.ss
	tag := modeSlowStart
	dir := filepath.Join(d.tmp, modeSlowStart)
	if err := os.MkdirAll(filepath.Join(dir, "ledger"), 0o755); err != nil {
		return nil, err
	}
	logf("=== mode %s (logs in %s)", tag, dir)

	consumers := []*instance{
		{service: ssGatewayOn, id: ssGatewayOn + "-1", name: consumerSSOn, bin: gatewayService, args: []string{"-mode", "graceful"}, watches: true},
		{service: ssGatewayOff, id: ssGatewayOff + "-1", name: consumerSSOff, bin: gatewayService, args: []string{"-mode", "graceful"}, watches: true},
	}
	groups := [2][]*instance{}
	for g, svc := range []string{ssProviderOn, ssProviderOff} {
		for i := 1; i <= nProviders; i++ {
			groups[g] = append(groups[g], &instance{service: svc, id: fmt.Sprintf("%s-%d", svc, i), bin: providerService,
				args: []string{"-mode", "graceful", "-warmup", ss.warmup.String(), "-warmup-delay", ss.warmupDelay.String()}})
		}
	}
	providers := slices.Concat(groups[0], groups[1])
	all := slices.Concat(consumers, providers)
	var stale []string
	for _, in := range all {
		stale = append(stale, base+"/"+in.service+"/"+in.id)
	}
	if err := deleteNodes(ctx, d.zkConnect, d.zkTLS, base, stale...); err != nil {
		logf("warning: cleaning old instance nodes: %v", err)
	}
	secret := drive.RandomHex(32)
	for _, in := range all {
		if in.port, err = d.newPort(); err != nil {
			return nil, err
		}
		in.vars = map[string]string{
			"GRACEKIT_ZK_SERVERS":   d.zkConnect,
			"GRACEKIT_BASE_PATH":    base,
			"GRACEKIT_SERVICE":      in.service,
			"GRACEKIT_INSTANCE_ID":  in.id,
			"GRACEKIT_ADDRESS":      "127.0.0.1",
			"GRACEKIT_FLUSH_SECRET": secret,
		}
		maps.Copy(in.vars, d.tlsVars)
	}
	for g := range groups {
		for _, in := range groups[g] {
			in.vars["GRACEKIT_FLUSH_GATEWAYS"] = consumers[g].service
			in.vars["PROVIDER_LATENCY"] = cfg.latency.String()
		}
		consumers[g].vars["GATEWAY_UPSTREAM"] = groups[g][0].service
		consumers[g].vars["GATEWAY_LOOPBACK_ONLY"] = "1"
	}
	consumers[0].vars["GRACEKIT_SLOW_START_WINDOW"] = ss.window.String()
	consumers[1].vars["GRACEKIT_SLOW_START"] = "off"

	defer func() {
		var ps []*drive.Proc
		for _, in := range providers {
			ps = append(ps, in.proc)
		}
		drive.StopAll(ps, 10*time.Second)
		ps = ps[:0]
		for _, in := range consumers {
			ps = append(ps, in.proc)
		}
		drive.StopAll(ps, 10*time.Second)
	}()
	d.useBase(base)
	// Providers first: the consumers' first load gives them full shares.
	for _, in := range slices.Concat(providers, consumers) {
		if err := d.startInstance(dir, in); err != nil {
			return nil, err
		}
	}
	logf("[%s] started 2x%d providers (-warmup %v -warmup-delay %v) and 2 gateways (slow start window %v, and off); waiting for them to be ready",
		tag, nProviders, ss.warmup, ss.warmupDelay, ss.window)
	for _, in := range slices.Concat(providers, consumers) {
		if err := waitReady(ctx, in, cfg.readyLimit); err != nil {
			return nil, err
		}
	}
	for _, c := range consumers {
		if err := waitRoutes(ctx, c, nProviders, cfg.readyLimit); err != nil {
			return nil, err
		}
	}
	// The first providers are cold too: let them warm before the load
	// that counts as steady.
	if err := warmThrough(ctx, consumers, ss.warmup); err != nil {
		return nil, err
	}
	logf("[%s] all ready and warm; load: %d workers per gateway, 20%% POST /api/orders", tag, ss.workers)

	deadline := time.Now().Add(cfg.loadLimit)
	loads := make([]*load, len(consumers))
	for i, c := range consumers {
		loads[i] = newLoad([]string{c.url("")}, fmt.Sprintf("%s-%s-%d-", d.runID, modeSlowStart, i), ss.workers, cfg.maxRequests, cfg.reqTimeout, deadline)
		loads[i].run(ctx)
	}
	stopLoads := func() {
		for _, l := range loads {
			l.stop()
		}
	}
	defer stopLoads()
	loadStart := loads[0].started
	if err := drive.SleepCtx(ctx, ss.steady); err != nil {
		return nil, err
	}

	res = &modeResult{Mode: modeSlowStart, Transport: transportHTTP, Workers: 2 * ss.workers, Latency: cfg.latency, SSWindow: ss.settle}
	var marks []mark
	var windows []span
	ended := func() bool { return loads[0].finished() || loads[1].finished() }
	for i := range nProviders {
		if ended() {
			res.Invalid = fmt.Sprintf("the load reached its bound before restart %d", i+1)
			break
		}
		pair := []*instance{groups[0][i], groups[1][i]}
		pairID := fmt.Sprintf("quote-ss-on/off-%d", i+1)
		sigAt := time.Now()
		marks = append(marks, mark{At: sigAt.Sub(loadStart), Kind: markSIGTERM, ID: pairID})
		logf("[%s] SIGTERM %s and %s", tag, pair[0].id, pair[1].id)
		stops := make([]stopResult, len(pair))
		var wg sync.WaitGroup
		for k, in := range pair {
			wg.Add(1)
			go func() {
				defer wg.Done()
				old := in.proc
				killed := old.Stop(syscall.SIGTERM, cfg.stopLimit)
				stops[k] = stopResult{ID: in.id, Wall: old.ExitedAt().Sub(sigAt), Killed: killed, Exit: old.ExitString()}
				stops[k].Report, _ = stopReportFile(old.LogPath())
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		for k, in := range pair {
			if stops[k].Killed {
				logf("[%s] %s did not exit within %v: killed", tag, in.id, cfg.stopLimit)
				if err := deleteNodes(ctx, d.zkConnect, d.zkTLS, base, base+"/"+in.service+"/"+in.id); err != nil {
					logf("warning: %v", err)
				}
			}
			if !cfg.reusePorts {
				if in.port, err = d.newPort(); err != nil {
					return nil, err
				}
			}
			if err := d.startInstance(dir, in); err != nil {
				return nil, err
			}
		}
		for _, in := range pair {
			if err := waitReady(ctx, in, cfg.readyLimit); err != nil {
				return nil, err
			}
		}
		readyAt := time.Now()
		marks = append(marks, mark{At: readyAt.Sub(loadStart), Kind: markRestart, ID: pairID})
		for k := range stops {
			stops[k].BackReady = readyAt.Sub(sigAt)
		}
		res.Stops = append(res.Stops, stops...)
		end := readyAt.Add(ss.settle)
		windows = append(windows, span{sigAt, end})
		if err := drive.SleepCtx(ctx, time.Until(end)); err != nil {
			return nil, err
		}
		for k, in := range pair {
			if !loads[k].seenSince(in.id, readyAt, []int{0}) {
				logf("[%s] warning: %s did not route to %s within %v of its /readyz", tag, consumers[k].id, in.id, ss.settle)
			}
		}
		logf("[%s] %s ready %.0fms after SIGTERM; window ends %v later", tag, pairID, ms(readyAt.Sub(sigAt)), ss.settle)
	}
	if res.Invalid == "" {
		if err := drive.SleepCtx(ctx, ss.steady); err != nil {
			return nil, err
		}
		if ended() {
			res.Invalid = "the load reached its bound before the last steady phase ended"
		}
	}
	stopLoads()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	led, err := readLedgers(filepath.Join(dir, "ledger"))
	if err != nil {
		return nil, fmt.Errorf("read the providers' ledgers: %w", err)
	}
	var samples []sample
	for i, l := range loads {
		for _, s := range l.all() {
			s.consumer = i
			samples = append(samples, s)
		}
	}
	names := namesOf(consumers)
	stoppedAt := loads[0].stoppedAt
	if loads[1].stoppedAt.After(stoppedAt) {
		stoppedAt = loads[1].stoppedAt
	}
	res.summarize(samples, stoppedAt.Sub(loadStart), names, led, nil)
	res.Timeline = newTimeline(tag, names, loadStart, samples, marks, nil)
	res.Timeline.Latency = true
	res.Timeline.FailedN = res.Failed()
	for _, w := range windows {
		res.Timeline.Windows = append(res.Timeline.Windows, [2]time.Duration{w.from.Sub(loadStart), w.to.Sub(loadStart)})
	}
	for i, c := range consumers {
		res.Consumers[i].Retries = scrapeRetries(c)
	}
	pw := p99ByWindow(samples, len(consumers), windows)
	for i, c := range res.Consumers {
		res.SlowStart = append(res.SlowStart, ssFigures{Name: c.Name, On: i == 0, Requests: c.Requests, Failed: c.Failed, Duplicated: c.Duplicated,
			P99Restart: pw[i].Restart, P99Steady: pw[i].Steady, NRestart: pw[i].NRestart, NSteady: pw[i].NSteady})
	}
	for _, f := range res.SlowStart {
		logf("[%s] %s: %d requests, %d failed, %d duplicated, p99 %.1fms in the restart windows (%d requests), %.1fms steady (%d), %.2fx",
			tag, f.Name, f.Requests, f.Failed, f.Duplicated, ms(f.P99Restart), f.NRestart, ms(f.P99Steady), f.NSteady, f.Ratio())
	}
	return res, nil
}

// warmThrough sends GET /api/quote through each consumer for span, from a
// few goroutines, so that every provider's cold phase is over.
func warmThrough(ctx context.Context, consumers []*instance, span time.Duration) error {
	if span <= 0 {
		return nil
	}
	client := drive.NewClient(8, 5*time.Second)
	defer client.CloseIdleConnections()
	until := time.Now().Add(span + 200*time.Millisecond)
	var wg sync.WaitGroup
	for _, c := range consumers {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(until) && ctx.Err() == nil {
					drive.Probe(client, c.url("/api/quote?symbol=ABC"))
				}
			}()
		}
	}
	wg.Wait()
	return ctx.Err()
}
