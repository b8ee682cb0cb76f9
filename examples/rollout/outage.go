package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gracekit/gracekit/examples/internal/drive"
	"github.com/gracekit/gracekit/zktest"
)

// The outage mode (issue 42, static stability): on a ZooKeeper of its own,
// 3 providers behind a gracekit gateway with a snapshot directory. Under
// load, ZooKeeper is stopped; a second gateway is started fresh on the same
// directory and the first one is restarted, both serving the snapshot's set;
// a fourth provider starts while ZooKeeper is down (GRACEKIT_SNAPSHOT_DIR,
// so it serves unregistered, provider.WithRegisterWhenReachable). Then
// ZooKeeper comes back: the gateways read it (snapshot age 0), the fourth
// provider registers and is ramped in by slow start, and one provider is
// restarted on a new port; the gateways must route to the live set.
const (
	modeOutage = "outage"

	outageProviderService = "quote-outage"
	outageGatewayService  = "gateway-outage"

	consumerRestarted = "restarted" // the gateway restarted during the outage
	consumerFresh     = "fresh"     // the one started for the first time during it

	// snapshotAgeMetric is the gateways' gauge (demometrics): > 0 while a
	// service is served from its snapshot, 0 once read from ZooKeeper.
	snapshotAgeMetric = "gracekit_sd_snapshot_age_seconds"
	// rampShownBelow: the late provider's share in the first half of its
	// ramp must be below this fraction of its share after the ramp. Linear
	// slow start gives it about a third; no slow start, about 1.
	rampShownBelow = 0.75
	// rampMinRequests is the fewest requests a share is computed over.
	rampMinRequests = 20
)

// outageConfig is the outage mode's shape (flags -outage-*).
type outageConfig struct {
	window    time.Duration // the gateways' GRACEKIT_SLOW_START_WINDOW
	startWait time.Duration // their GRACEKIT_SNAPSHOT_START_WAIT
	hold      time.Duration // load through the snapshot-serving gateways before ZooKeeper returns
	converge  time.Duration // bound on the gateways' convergence once it returned
}

// check says what is wrong with the flags, or nil.
func (c outageConfig) check() error {
	if c.window <= 0 || c.startWait <= 0 || c.hold <= 0 || c.converge <= 0 {
		return fmt.Errorf("invalid outage flags -outage-window %v -outage-start-wait %v -outage-hold %v -outage-converge %v (want every duration positive)",
			c.window, c.startWait, c.hold, c.converge)
	}
	if c.converge < c.window {
		return fmt.Errorf("invalid -outage-converge %v: shorter than -outage-window %v, the ramp it must see through", c.converge, c.window)
	}
	return nil
}

// lateShare is the late provider's share of the successful requests in
// the first half of its ramp and after it.
type lateShare struct {
	Ramp, After   float64 // fractions, 0..1
	NRamp, NAfter int     // successful requests in each span
}

// shown tells whether the shares show a ramp: enough requests in both
// spans, and the ramp's share well below the share after it.
func (s lateShare) shown() bool {
	return s.NRamp >= rampMinRequests && s.NAfter >= rampMinRequests && s.Ramp < rampShownBelow*s.After
}

// outageFigures is what the outage mode measured beyond the load's counts.
type outageFigures struct {
	Gateways            int           // gateways started while ZooKeeper was down
	StartedFromSnapshot int           // of them, those that served their snapshot's set
	Converged           int           // gateways that read ZooKeeper again and routed to the live set
	Down                time.Duration // ZooKeeper stopped until it served again
	ConvergeAfter       time.Duration // ZooKeeper back until the last gateway read it and routed to the late provider
	LateID              string        // the provider started during the outage
	LateServed          bool          // it answered a direct call while ZooKeeper was down
	LateRegistered      bool          // the gateways routed to it once ZooKeeper was back
	Share               lateShare
	Window              time.Duration // the gateways' slow start window
}

// outageLine is the outage mode's RESULT line.
func outageLine(r *modeResult) string {
	o := r.Outage
	line := fmt.Sprintf("RESULT mode=%s requests=%d failed=%d duplicated=%d started_from_snapshot=%d gateways=%d converged=%d late_registered=%d ramp_share_pct=%.1f share_pct=%.1f zk_down_s=%.1f converge_ms=%.0f p99_ms=%.1f",
		modeOutage, r.Requests(), r.Failed(), r.Duplicated(), o.StartedFromSnapshot, o.Gateways, o.Converged, b2i(o.LateRegistered),
		100*o.Share.Ramp, 100*o.Share.After, o.Down.Seconds(), ms(o.ConvergeAfter), ms(r.Total.P99))
	if r.Invalid != "" {
		line += " invalid=1"
	}
	return line
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// outageProblems says why an outage run does not show static stability,
// one reason each; none when it does. failed and duplicated are verdict's.
func outageProblems(o *outageFigures) []string {
	var why []string
	if o.StartedFromSnapshot < 1 {
		why = append(why, fmt.Sprintf("no gateway of %d started while ZooKeeper was down served from its snapshot", o.Gateways))
	}
	if o.Converged < o.Gateways {
		why = append(why, fmt.Sprintf("%d of %d gateways converged to the live set once ZooKeeper was back", o.Converged, o.Gateways))
	}
	if !o.LateServed {
		why = append(why, fmt.Sprintf("%s, started while ZooKeeper was down, did not serve", o.LateID))
	}
	if !o.LateRegistered {
		why = append(why, fmt.Sprintf("%s never got traffic through the gateways once ZooKeeper was back", o.LateID))
	} else if !o.Share.shown() {
		why = append(why, fmt.Sprintf("%s was not ramped in: %.1f%% of %d requests in the first half of its ramp, %.1f%% of %d after it (want under %.0f%% of the latter, over at least %d requests each)",
			o.LateID, 100*o.Share.Ramp, o.Share.NRamp, 100*o.Share.After, o.Share.NAfter, 100*rampShownBelow, rampMinRequests))
	}
	return why
}

// lateShares measures id's share of the successful requests: from the
// first one it answered (t0, by completion), over [t0, t0+window/2) and
// [t0+window, end). Both are zero when it answered none.
func lateShares(samples []sample, id string, window time.Duration, end time.Time) lateShare {
	var t0 time.Time
	for _, s := range samples {
		if done := s.at.Add(s.latency); !s.failed && s.instance == id && (t0.IsZero() || done.Before(t0)) {
			t0 = done
		}
	}
	if t0.IsZero() {
		return lateShare{}
	}
	var res lateShare
	var inRamp, inAfter int
	for _, s := range samples {
		if s.failed {
			continue
		}
		done := s.at.Add(s.latency)
		switch {
		case !done.Before(t0) && done.Before(t0.Add(window/2)):
			res.NRamp++
			if s.instance == id {
				inRamp++
			}
		case !done.Before(t0.Add(window)) && done.Before(end):
			res.NAfter++
			if s.instance == id {
				inAfter++
			}
		}
	}
	if res.NRamp > 0 {
		res.Ramp = float64(inRamp) / float64(res.NRamp)
	}
	if res.NAfter > 0 {
		res.After = float64(inAfter) / float64(res.NAfter)
	}
	return res
}

// snapshotAge reads a gateway's snapshot age gauge for service from its
// Prometheus text; ok is false when the gauge has no such series.
func snapshotAge(metricsText, service string) (age float64, ok bool) {
	v := parseCounter(strings.NewReader(metricsText), snapshotAgeMetric, "service")
	age, ok = v[service]
	return age, ok
}

// gatewayStale scrapes a gateway and tells whether it serves service from
// its snapshot.
func gatewayStale(c *instance, service string) (bool, error) {
	body, err := scrape(c)
	if err != nil {
		return false, err
	}
	age, ok := snapshotAge(body, service)
	if !ok {
		return false, fmt.Errorf("%s: no %s{service=%q} in its /metrics", c.id, snapshotAgeMetric, service)
	}
	return age > 0, nil
}

// waitSnapshot waits until dir holds service's snapshot file
// (docs/STATIC-STABILITY.md: gracekit-<key>-<service>.snapshot.json).
func waitSnapshot(ctx context.Context, dir, service string, limit time.Duration) error {
	pattern := filepath.Join(dir, "gracekit-*-"+url.PathEscape(service)+".snapshot.json")
	for deadline := time.Now().Add(limit); ; {
		if m, err := filepath.Glob(pattern); err != nil {
			return err
		} else if len(m) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no snapshot %s within %v", pattern, limit)
		}
		if err := drive.SleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// startOutageZK starts the outage mode's own ZooKeeper: the mode stops it,
// and the modes beside it must not notice. Its client port is kept from
// newPort, so that no child takes it while the server is down.
func (d *driver) startOutageZK(ctx context.Context) (*zktest.Cluster, error) {
	c, err := zktest.Start(filepath.Join(d.tmp, "zookeeper-"+modeOutage), d.zkOptions()...)
	if err != nil {
		return nil, fmt.Errorf("start the outage mode's ZooKeeper: %w", err)
	}
	d.zkMu.Lock()
	d.outageZK = c
	d.zkMu.Unlock()
	d.portMu.Lock()
	for _, s := range c.Servers {
		d.usedPorts[s.ClientPort] = true
		if s.SecureClientPort != 0 { // -zk-tls
			d.usedPorts[s.SecureClientPort] = true
		}
	}
	d.portMu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err // closeOutageZK, deferred by the caller, stops it
	}
	return c, nil
}

// closeOutageZK stops the outage mode's ZooKeeper, if it runs.
func (d *driver) closeOutageZK() {
	d.zkMu.Lock()
	defer d.zkMu.Unlock()
	if d.outageZK != nil {
		_ = d.outageZK.Close()
		d.outageZK = nil
	}
}

// runOutage runs the outage mode over HTTP, under base on its own
// ZooKeeper.
func (d *driver) runOutage(ctx context.Context, base string) (res *modeResult, err error) {
	cfg, oc := d.cfg, d.cfg.outage
	tag := modeOutage
	dir := filepath.Join(d.tmp, modeOutage)
	snapDir := filepath.Join(dir, "snapshot")               // the gateways', shared as replicas on one node may
	provSnapDir := filepath.Join(dir, "snapshot-providers") // the providers' (their flush watchers')
	if err := os.MkdirAll(filepath.Join(dir, "ledger"), 0o755); err != nil {
		return nil, err
	}
	logf("=== mode %s (logs in %s)", tag, dir)

	logf("[%s] starting a ZooKeeper of its own (zktest): the mode stops it", tag)
	// Deferred first, so it runs last: the processes stop while it serves.
	defer d.closeOutageZK()
	zkc, err := d.startOutageZK(ctx)
	if err != nil {
		return nil, err
	}
	connect := d.connectString(zkc)

	gateways := []*instance{
		{service: outageGatewayService, id: outageGatewayService + "-1", name: consumerRestarted, bin: gatewayService, args: []string{"-mode", "graceful"}, watches: true},
		{service: outageGatewayService, id: outageGatewayService + "-2", name: consumerFresh, bin: gatewayService, args: []string{"-mode", "graceful"}, watches: true},
	}
	var providers []*instance
	for i := 1; i <= nProviders+1; i++ {
		providers = append(providers, &instance{service: outageProviderService, id: fmt.Sprintf("%s-%d", outageProviderService, i),
			bin: providerService, args: []string{"-mode", "graceful"}})
	}
	late := providers[nProviders] // started during the outage
	secret := drive.RandomHex(32)
	for _, in := range slices.Concat(gateways, providers) {
		if in.port, err = d.newPort(); err != nil {
			return nil, err
		}
		in.vars = map[string]string{
			"GRACEKIT_ZK_SERVERS":   connect,
			"GRACEKIT_BASE_PATH":    base,
			"GRACEKIT_SERVICE":      in.service,
			"GRACEKIT_INSTANCE_ID":  in.id,
			"GRACEKIT_ADDRESS":      "127.0.0.1",
			"GRACEKIT_FLUSH_SECRET": secret,
		}
		maps.Copy(in.vars, d.tlsVars)
	}
	for _, in := range gateways {
		in.vars["GATEWAY_UPSTREAM"] = outageProviderService
		in.vars["GATEWAY_LOOPBACK_ONLY"] = "1"
		in.vars["GRACEKIT_SNAPSHOT_DIR"] = snapDir
		in.vars["GRACEKIT_SNAPSHOT_START_WAIT"] = oc.startWait.String()
		in.vars["GRACEKIT_SLOW_START_WINDOW"] = oc.window.String()
	}
	for _, in := range providers {
		in.vars["GRACEKIT_FLUSH_GATEWAYS"] = outageGatewayService
		in.vars["PROVIDER_LATENCY"] = cfg.latency.String()
		// A snapshot directory turns on provider.WithRegisterWhenReachable
		// (the late one serves during the outage and registers once
		// ZooKeeper answers), and the provider's watch of the gateways it
		// flushes starts from the snapshot its siblings wrote: it knows
		// them before ZooKeeper is back.
		in.vars["GRACEKIT_SNAPSHOT_DIR"] = provSnapDir
		in.vars["GRACEKIT_SNAPSHOT_START_WAIT"] = oc.startWait.String()
	}

	defer func() {
		drive.StopAll(procsOf(providers), 10*time.Second)
		drive.StopAll(procsOf(gateways), 10*time.Second)
	}()
	// The ZooKeeper and its data go with the run's temporary directory;
	// nothing to delete under base.

	first := providers[:nProviders]
	for _, in := range first {
		if err := d.startInstance(dir, in); err != nil {
			return nil, err
		}
	}
	for _, in := range first {
		if err := waitReady(ctx, in, cfg.readyLimit); err != nil {
			return nil, err
		}
	}
	g1, g2 := gateways[0], gateways[1]
	if err := d.startInstance(dir, g1); err != nil {
		return nil, err
	}
	if err := waitReady(ctx, g1, cfg.readyLimit); err != nil {
		return nil, err
	}
	if err := waitRoutes(ctx, g1, nProviders, cfg.readyLimit); err != nil {
		return nil, err
	}
	if err := waitSnapshot(ctx, snapDir, outageProviderService, 10*time.Second); err != nil {
		return nil, fmt.Errorf("%s: %w", g1.id, err)
	}
	// The providers' watch of the gateways' service, now that one registered.
	if err := waitSnapshot(ctx, provSnapDir, outageGatewayService, 10*time.Second); err != nil {
		return nil, fmt.Errorf("the providers: %w", err)
	}
	logf("[%s] %d providers behind %s, its snapshot written in %s; load: %d workers", tag, nProviders, g1.id, snapDir, cfg.workers)

	ld := newLoad([]string{g1.url(""), g2.url("")}, fmt.Sprintf("%s-%s-", d.runID, modeOutage), cfg.workers, cfg.maxRequests, cfg.reqTimeout, time.Now().Add(cfg.loadLimit))
	ld.setActive(1, false) // the fresh gateway joins once it serves
	ld.run(ctx)
	defer ld.stop()
	loadStart := ld.started
	if err := drive.SleepCtx(ctx, cfg.preRoll); err != nil {
		return nil, err
	}

	res = &modeResult{Mode: modeOutage, Transport: transportHTTP, Workers: cfg.workers, Latency: cfg.latency}
	o := &outageFigures{Gateways: len(gateways), LateID: late.id, Window: oc.window}
	res.Outage = o
	var marks []mark

	// ZooKeeper down.
	downAt := time.Now()
	logf("[%s] stopping ZooKeeper (%d requests so far, %d failed)", tag, ld.completed.Load(), ld.fails.Load())
	if err := zkc.StopAll(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	// A gateway starts fresh, and a provider, while ZooKeeper is down.
	for _, in := range []*instance{g2, late} {
		if err := d.startInstance(dir, in); err != nil {
			return nil, err
		}
	}
	fromSnapshot := func(g *instance) error {
		if err := waitReady(ctx, g, cfg.readyLimit); err != nil {
			return err
		}
		stale, err := gatewayStale(g, outageProviderService)
		if err != nil {
			return err
		}
		if stale {
			o.StartedFromSnapshot++
			logf("[%s] %s serves from its snapshot", tag, g.id)
		} else {
			logf("[%s] warning: %s is ready but not from its snapshot", tag, g.id)
		}
		return waitRoutes(ctx, g, nProviders, cfg.readyLimit)
	}
	if err := fromSnapshot(g2); err != nil {
		return nil, err
	}
	marks = append(marks, mark{At: time.Since(loadStart), Kind: markRestart, ID: g2.id})
	ld.setActive(1, true)
	if err := waitReady(ctx, late, cfg.readyLimit); err != nil {
		return nil, err
	}
	o.LateServed = answers(late)
	logf("[%s] %s ready while ZooKeeper is down; answers a direct call: %v", tag, late.id, o.LateServed)

	// The first gateway restarts: out of rotation, stopped, started again.
	ld.setActive(0, false)
	if err := drive.SleepCtx(ctx, 200*time.Millisecond); err != nil { // what was sent to it lands
		return nil, err
	}
	sigAt := time.Now()
	marks = append(marks, mark{At: sigAt.Sub(loadStart), Kind: markSIGTERM, ID: g1.id})
	if g1.proc.Stop(syscall.SIGTERM, cfg.stopLimit) {
		logf("[%s] %s did not exit within %v: killed", tag, g1.id, cfg.stopLimit)
	}
	logf("[%s] %s exited (%s) after %.0fms; starting it again", tag, g1.id, g1.proc.ExitString(), ms(g1.proc.ExitedAt().Sub(sigAt)))
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := d.startInstance(dir, g1); err != nil {
		return nil, err
	}
	if err := fromSnapshot(g1); err != nil {
		return nil, err
	}
	marks = append(marks, mark{At: time.Since(loadStart), Kind: markRestart, ID: g1.id})
	ld.setActive(0, true)
	if err := drive.SleepCtx(ctx, oc.hold); err != nil {
		return nil, err
	}
	if ld.finished() {
		res.Invalid = "the load reached its bound before ZooKeeper came back"
	}

	// ZooKeeper back.
	logf("[%s] starting ZooKeeper again (%d requests so far, %d failed)", tag, ld.completed.Load(), ld.fails.Load())
	if err := zkc.StartAll(); err != nil {
		return nil, fmt.Errorf("restart ZooKeeper: %w", err)
	}
	upAt := time.Now()
	o.Down = upAt.Sub(downAt)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	convergedAt := make([]time.Time, len(gateways))
	for deadline := upAt.Add(oc.converge); slices.ContainsFunc(convergedAt, time.Time.IsZero) && time.Now().Before(deadline) && !ld.ended(); {
		for i, g := range gateways {
			if !convergedAt[i].IsZero() || !ld.seenSince(late.id, upAt, []int{i}) {
				continue
			}
			if stale, err := gatewayStale(g, outageProviderService); err == nil && !stale {
				convergedAt[i] = time.Now()
			}
		}
		if err := drive.SleepCtx(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
	for i, g := range gateways {
		if convergedAt[i].IsZero() {
			logf("[%s] warning: %s did not read ZooKeeper and route to %s within %v of its return", tag, g.id, late.id, oc.converge)
			continue
		}
		o.LateRegistered = true
		o.ConvergeAfter = max(o.ConvergeAfter, convergedAt[i].Sub(upAt))
	}
	logf("[%s] ZooKeeper down for %.1fs; gateways live and routing to %s %.0fms after its return", tag, o.Down.Seconds(), late.id, ms(o.ConvergeAfter))

	// Let the ramp run its window and a little more, to see it end.
	var firstLate time.Time
	for _, t := range convergedAt {
		if !t.IsZero() && (firstLate.IsZero() || t.Before(firstLate)) {
			firstLate = t
		}
	}
	if !firstLate.IsZero() {
		if err := drive.SleepCtx(ctx, time.Until(firstLate.Add(oc.window+1500*time.Millisecond))); err != nil {
			return nil, err
		}
	}
	shareEnd := time.Now()

	// A provider restarts on a new port: the gateways must follow the live set.
	p := providers[1]
	sigAt = time.Now()
	marks = append(marks, mark{At: sigAt.Sub(loadStart), Kind: markSIGTERM, ID: p.id})
	st := stopResult{ID: p.id}
	st.Killed = p.proc.Stop(syscall.SIGTERM, cfg.stopLimit)
	st.Wall, st.Exit = p.proc.ExitedAt().Sub(sigAt), p.proc.ExitString()
	if st.Report, err = stopReportFile(p.proc.LogPath()); err != nil {
		st.ReportErr = err.Error()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if p.port, err = d.newPort(); err != nil {
		return nil, err
	}
	if err := d.startInstance(dir, p); err != nil {
		return nil, err
	}
	if err := waitReady(ctx, p, cfg.readyLimit); err != nil {
		return nil, err
	}
	readyAt := time.Now()
	st.BackReady = readyAt.Sub(sigAt)
	marks = append(marks, mark{At: readyAt.Sub(loadStart), Kind: markRestart, ID: p.id})
	for deadline := readyAt.Add(10 * time.Second); !ld.seenSince(p.id, readyAt, []int{0, 1}) && time.Now().Before(deadline) && !ld.ended(); {
		if err := drive.SleepCtx(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
	for i, g := range gateways {
		if convergedAt[i].IsZero() {
			continue
		}
		if ld.seenSince(p.id, readyAt, []int{i}) {
			o.Converged++
		} else {
			logf("[%s] warning: %s did not route to the restarted %s within 10s of its /readyz", tag, g.id, p.id)
		}
	}
	res.Stops = append(res.Stops, st)
	logf("[%s] %s restarted at %s, ready after %.0fms; %d of %d gateways on the live set", tag, p.id, p.addr(), ms(st.BackReady), o.Converged, o.Gateways)
	if err := drive.SleepCtx(ctx, time.Second); err != nil {
		return nil, err
	}
	if res.Invalid == "" && ld.ended() {
		res.Invalid = "the load reached its bound before the run's end"
	}
	ld.stop()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	led, err := readLedgers(filepath.Join(dir, "ledger"))
	if err != nil {
		return nil, fmt.Errorf("read the providers' ledgers: %w", err)
	}
	samples := ld.all()
	names := namesOf(gateways)
	res.summarize(samples, ld.stoppedAt.Sub(ld.started), names, led, nil)
	o.Share = lateShares(samples, late.id, oc.window, shareEnd)
	res.Timeline = newTimeline(tag, names, loadStart, samples, marks, nil)
	res.Timeline.FailedN = res.Failed()
	res.Timeline.Windows = [][2]time.Duration{{downAt.Sub(loadStart), upAt.Sub(loadStart)}}
	res.Timeline.WindowLabel = "ZooKeeper down (outage)"
	for i, g := range gateways {
		res.Consumers[i].Retries = scrapeRetries(g)
	}
	res.Metrics = scrapeGracekit(g1)
	logf("[%s] done: %d requests, %d failed, %d duplicated; %d of %d gateways started from the snapshot; %s: %.1f%% of requests in the first half of its ramp, %.1f%% after",
		tag, res.Requests(), res.Failed(), res.Duplicated(), o.StartedFromSnapshot, o.Gateways, late.id, 100*o.Share.Ramp, 100*o.Share.After)
	return res, nil
}

// answers tells whether the provider answers GET /quote directly, naming
// itself.
func answers(in *instance) bool {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	ok, id, _ := drive.Probe(client, in.url("/quote?symbol=ABC"))
	return ok && id == in.id
}

// errNoOutageZK says the outage mode needs a local ZooKeeper install.
var errNoOutageZK = errors.New("the outage mode stops a ZooKeeper of its own, and needs ZooKeeper installed even with GRACEKIT_ZK_SERVERS")
