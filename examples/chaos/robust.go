package main

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gracekit/gracekit/examples/internal/drive"
	"github.com/gracekit/gracekit/examples/internal/history"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// Robustness mode: each seed draws a schedule of overlapping faults
// (schedule.go), run on a fresh 3-member ensemble with both groups under
// load, while the registry's truth and every in-process consumer's
// published sets are recorded (record.go); then history checks the lot.

const (
	burstService  = "quote-burst" // the driver's own registrations: bursts and status flips
	robustTimeout = 4 * time.Second
	// robustReconnect is the cap of the library's reconnect backoff
	// (internal/zkconn's watchRetryMax), which the run's bounds are derived from.
	robustReconnect = time.Second
	checkRecovered  = 30 * time.Second
)

// The providers' health check in robustness mode (GRACEKIT_HEALTH_*).
const (
	healthInterval = 250 * time.Millisecond
	healthFailures = 2
	healthHold     = time.Second
)

// healthDetect is how long a provider may take from its check failing to
// its verdict written: a check per interval until healthFailures failed
// (one more for the phase of the ticker), the hold after a transition, and
// the status write's bound (2 intervals, provider's record).
const healthDetect = healthInterval*(healthFailures+1) + healthHold + 2*healthInterval

// robustBounds are the bounds every seed is held to, from its timeouts.
var robustBounds = history.RunBounds(robustTimeout, robustReconnect)

// robustState is one seed's record, beside the driver's processes.
type robustState struct {
	seed  int64
	sched schedule

	mu      sync.Mutex
	runs    []history.Run
	current map[*instance]int // index in runs of each provider's run
	blinds  []history.Blind
	heals   []history.Heal
	crashes []history.Crash
	stops   []history.Stop
	writes  []history.Written
	guards  []history.Guard
	sick    []history.Sick
	ready   []history.ReadySample
	calls   []history.Call      // bounded library calls (lostreply.go)
	extra   []history.Violation // the driver's own findings: a fault that could not run, gateways that did not route again

	truth   *truthRecorder
	pubs    publishLog
	recs    []recorder
	targets []target
	bursts  *burstClient
	proxies []*zkProxy
	closed  bool
}

// target is a consumer the faults may cut off or expire.
type target struct {
	name  string
	proxy *zkProxy
}

// env sets what robustness mode adds to an instance's environment: a
// short session timeout, and for providers a health file and a quick check.
func (rs *robustState) env(d *driver, in *instance) {
	in.vars["GRACEKIT_ZK_SESSION_TIMEOUT"] = robustTimeout.String()
	armFailpoints(rs.seed, d.cfg, in.vars) // faults.go
	if in.proxy != nil {
		in.vars["PROVIDER_HEALTH_FILE"] = filepath.Join(d.tmp, "logs", in.id+".sick")
		in.vars["GRACEKIT_HEALTH_INTERVAL"] = healthInterval.String()
		in.vars["GRACEKIT_HEALTH_FAILURES"] = strconv.Itoa(healthFailures)
		in.vars["GRACEKIT_HEALTH_PASSES"] = "2"
		in.vars["GRACEKIT_HEALTH_HOLD"] = healthHold.String()
	} else {
		rampEnv(in) // ramp.go
	}
}

// started notes a provider's new run.
func (rs *robustState) started(d *driver, in *instance) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.runs = append(rs.runs, history.Run{Service: in.service, ID: in.id, Path: d.basePath + "/" + in.service + "/" + in.id, Start: time.Now()})
	rs.current[in] = len(rs.runs) - 1
}

// stopping notes that a provider's run ends from now on.
func (rs *robustState) stopping(in *instance, how string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if i, ok := rs.current[in]; ok && rs.runs[i].Stopping.IsZero() {
		rs.runs[i].Stopping, rs.runs[i].How = time.Now(), how
	}
}

func (rs *robustState) blind(name string, from time.Time, what string) {
	rs.mu.Lock()
	rs.blinds = append(rs.blinds, history.Blind{Target: name, From: from, To: time.Now(), What: what})
	rs.mu.Unlock()
}

func (rs *robustState) violation(check, what string) {
	rs.mu.Lock()
	rs.extra = append(rs.extra, history.Violation{Check: check, At: time.Now(), What: what})
	rs.mu.Unlock()
}

// close stops the recorders, the bursts' client and their proxies.
func (rs *robustState) close() {
	if rs.closed {
		return
	}
	rs.closed = true
	for _, r := range rs.recs {
		r.Stop()
	}
	if rs.bursts != nil {
		rs.bursts.close()
	}
	if rs.truth != nil {
		rs.truth.Close()
	}
	for _, px := range rs.proxies {
		px.Close()
	}
}

// burstClient holds the driver's own registrations, on one client behind
// a proxy: two steady ones whose status flips, and the bursts.
type burstClient struct {
	c      *sd.Client
	proxy  *zkProxy
	base   string
	steady []*sd.Registrar
	port   int
}

func (b *burstClient) close() { b.c.Close() }

func (b *burstClient) registrar(id string) (*sd.Registrar, error) {
	b.port++
	return sd.NewRegistrar(b.c, sd.Instance{Name: burstService, ID: id, Address: "127.0.0.1", Port: b.port}, sd.BasePath(b.base))
}

// seedResult is what one schedule showed.
type seedResult struct {
	seed       int64
	faults     int
	report     history.Report
	err        error
	dir        string
	elapsed    time.Duration
	violations int
}

// randomSeed is a fresh seed, printed so that it replays.
func randomSeed() int64 {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return int64(binary.BigEndian.Uint64(b[:]) >> 1)
}

func runRobust(cfg config) int {
	seeds := []int64{cfg.seed}
	if !cfg.seeded {
		seeds = seeds[:0]
		for range cfg.seeds {
			seeds = append(seeds, randomSeed())
		}
	}
	root, err := os.MkdirTemp("", "gracekit-robust-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		curMu sync.Mutex
		cur   *driver
	)
	var interrupted bool
	stopSignals := drive.OnInterrupt(func(sig os.Signal) {
		logf("%v: stopping every process", sig)
		cancel()
		curMu.Lock()
		interrupted = true
		if cur != nil {
			cur.interrupted.Store(true)
			cur.sup.KillAll()
		}
		curMu.Unlock()
	}, func() {
		curMu.Lock()
		if cur != nil {
			cur.sup.KillAll()
			cur.closeZK()
		}
		curMu.Unlock()
		fmt.Fprintf(os.Stderr, "chaos: interrupted again; logs in %s\n", root)
		os.Exit(130)
	})
	defer stopSignals()

	binDir := cfg.binDir
	if binDir == "" {
		binDir = filepath.Join(root, "bin")
		logf("building examples/provider, examples/gateway and cmd/gracekit")
		if err := buildTagged(ctx, binDir, robustTags(cfg), pkgProvider, pkgGateway, pkgCLI); err != nil { // mutants.go
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 1
		}
	}
	bins := map[string]string{providerService: filepath.Join(binDir, "provider"), gatewayService: filepath.Join(binDir, "gateway"),
		cliName: filepath.Join(binDir, cliName)}
	var total history.Report
	violations, failedSeeds := 0, 0
	for _, seed := range seeds {
		dir := filepath.Join(root, fmt.Sprintf("seed-%d", seed))
		d := &driver{cfg: cfg, tmp: dir, sup: drive.NewSupervisor(), basePath: basePathPrefix + drive.RandomHex(8),
			runID: drive.RandomHex(6), bins: bins}
		curMu.Lock()
		cur = d
		curMu.Unlock()
		res := d.robustSeed(ctx, seed)
		curMu.Lock()
		stop := interrupted
		cur = nil
		curMu.Unlock()
		if stop {
			fmt.Fprintf(os.Stderr, "chaos: interrupted; logs in %s\n", root)
			return 130
		}
		fmt.Printf("ROBUST seed=%d faults=%d checks=%d violations=%d converge=%v leave=%v starve=%v stops=%d traced=%d changes=%d p99=%v max=%v slowest_heal=%v\n",
			seed, res.faults, res.report.Checks, res.violations, robustBounds.Converge, res.report.Leave, res.report.Starve, res.report.Stops, res.report.Traced,
			res.report.Changes.N, res.report.Changes.P99.Round(time.Millisecond), res.report.Changes.Max.Round(time.Millisecond), res.report.Slowest.Round(time.Millisecond))
		printViolated(seed, res.report.Violations) // mutants.go
		total.Requests += res.report.Requests
		total.Failed += res.report.Failed
		total.Duplicated += res.report.Duplicated
		total.RestoreFailed += res.report.RestoreFailed
		violations += res.violations
		if res.violations > 0 {
			failedSeeds++
			fmt.Fprintf(os.Stderr, "chaos: seed %d FAILED (replay: make chaos CHAOS_SEED=%d); history, report and logs in %s\n", seed, seed, dir)
		} else if !cfg.keep {
			_ = os.RemoveAll(dir)
		}
	}
	// restore_failed: calls that failed while the providers registered
	// again in a restored (emptied) ensemble, which the live read rightly
	// showed empty; said apart from failed, not hidden.
	fmt.Printf("RESULT mode=robustness seeds=%d violations=%d requests=%d failed=%d duplicated=%d restore_failed=%d\n",
		len(seeds), violations, total.Requests, total.Failed, total.Duplicated, total.RestoreFailed)
	if failedSeeds > 0 {
		return 1
	}
	if !cfg.keep {
		_ = os.RemoveAll(root)
	} else {
		fmt.Fprintf(os.Stderr, "chaos: kept %s\n", root)
	}
	return 0
}

// robustSeed runs seed's schedule on a fresh ensemble and checks its
// history. A fault the driver could not run is a violation of its own.
func (d *driver) robustSeed(ctx context.Context, seed int64) (res seedResult) {
	begin := time.Now()
	res = seedResult{seed: seed, dir: d.tmp}
	rs := &robustState{seed: seed, current: map[*instance]int{}}
	d.rob = rs
	defer d.shutdown()
	h, err := d.robustRun(ctx, rs)
	if err != nil {
		res.err = err
		rs.violation("schedule", "the run stopped: "+err.Error())
	}
	res.faults = rs.sched.faults()
	if h == nil {
		h = &history.History{Seed: seed}
	}
	res.report = history.Check(h, robustBounds)
	res.report.Violations = append(res.report.Violations, rs.extra...)
	res.violations = len(res.report.Violations)
	res.elapsed = time.Since(begin)
	logf("seed %d: %d faults, %d checks (%d unverified), %d violations, %d requests in %.0fs; slowest convergence after a heal %v (%s)",
		seed, res.faults, res.report.Checks, res.report.Unverified, res.violations, res.report.Requests, res.elapsed.Seconds(),
		res.report.Slowest.Round(time.Millisecond), res.report.SlowestBy)
	logf("seed %d: checks by validator: %s", seed, res.report.ByCheckString())
	if res.report.RestoreFailed > 0 {
		logf("seed %d: %d requests failed within the restore's bound (the providers registering again): counted apart", seed, res.report.RestoreFailed)
	}
	if res.violations > 0 {
		for i, v := range res.report.Violations {
			if i == 10 {
				logf("  ... %d more in %s", res.violations-10, filepath.Join(d.tmp, "report.txt"))
				break
			}
			logf("  %s %s [%s %s] %s", v.At.Format("15:04:05.000"), v.Check, v.Consumer, v.Service, v.What)
		}
		if err := history.Write(d.tmp, h, res.report); err != nil {
			logf("seed %d: writing its history: %v", seed, err)
		}
	}
	return res
}

func (d *driver) robustRun(ctx context.Context, rs *robustState) (*history.History, error) {
	if err := os.MkdirAll(filepath.Join(d.tmp, "logs"), 0o755); err != nil {
		return nil, err
	}
	c, err := d.startEnsemble(zktest.Size(3), zktest.Isolatable()) // Isolatable: the lag fault
	if err != nil {
		return nil, fmt.Errorf("start ZooKeeper: %w", err)
	}
	d.zkMu.Lock()
	d.cluster = c
	d.zkMu.Unlock()
	r, err := dialZK(d.memberAddrs(c), d.zkDialer())
	if err != nil {
		return nil, err
	}
	d.zkMu.Lock()
	d.reader = r
	d.zkMu.Unlock()
	services := []string{burstService}
	for _, tr := range d.cfg.transports {
		if tr == transportGRPC {
			services = append(services, grpcProviderService)
		} else {
			services = append(services, providerService)
		}
	}
	h := &history.History{Seed: rs.seed, Start: time.Now(), SessionTimeout: robustTimeout}
	if rs.truth, err = newTruthRecorder(d.memberAddrs(c), d.zkDialer(), d.basePath, services); err != nil {
		return h, err
	}
	if err := d.startAll(ctx); err != nil {
		return h, err
	}
	if err := d.startRecorders(ctx, rs, services); err != nil {
		return h, err
	}
	rs.sched = newSchedule(rs.seed, scheduleShape{rounds: d.cfg.rounds, consumers: len(rs.targets), groups: len(d.groups),
		providers: nProviders, members: len(c.Servers), sessionTimeout: robustTimeout, bias: d.cfg.bias})
	h.Schedule = rs.sched.String()
	h.SlowStart = d.slowStart() // ramp.go
	logf("seed %d: %d faults in %d rounds: %s", rs.seed, rs.sched.faults(), len(rs.sched.Rounds), rs.sched)
	var names []string
	for i, t := range rs.targets {
		names = append(names, fmt.Sprintf("%d=%s", i, t.name))
	}
	logf("consumers: %s", strings.Join(names, " "))
	for _, g := range d.groups {
		urls := make([]string, len(g.gateways))
		for i, gw := range g.gateways {
			urls[i] = gw.url("")
		}
		run := d.runID + "-" + g.transport
		g.load = newLoad(urls, run, d.cfg.rate, d.cfg.workers, d.cfg.reqTimeout)
		if g.transport == transportGRPC {
			g.load.noRetry = []bool{false, true}
		}
		g.load.start()
	}
	if rs.sched.Restore == restoreSnapshot {
		if err := d.takeSnapshot(ctx); err != nil { // restore.go
			return h, fmt.Errorf("copy a member's data for the restore: %w", err)
		}
	}
	if err := drive.SleepCtx(ctx, d.cfg.preRoll); err != nil {
		return h, err
	}
	for i, rd := range rs.sched.Rounds {
		var wg sync.WaitGroup
		for _, st := range rd.Steps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := drive.SleepCtx(ctx, st.At); err != nil {
					return
				}
				if err := d.robustStep(ctx, rs, st, i); err != nil && ctx.Err() == nil {
					rs.violation("schedule", fmt.Sprintf("round %d: %s: %v", i+1, st, err))
				}
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			return h, ctx.Err()
		}
		heal := time.Now()
		rs.mu.Lock()
		rs.heals = append(rs.heals, history.Heal{At: heal, What: fmt.Sprintf("round %d: %s", i+1, roundString(rd))})
		rs.mu.Unlock()
		logf("round %d healed (%s requests so far)", i+1, d.completed())
		for _, g := range d.groups {
			if err := d.waitRoutedAll(ctx, g, heal); err != nil {
				rs.violation("recovery", fmt.Sprintf("round %d: %v", i+1, err))
			}
		}
		if err := drive.SleepCtx(ctx, rd.Pause); err != nil {
			return h, err
		}
	}
	// Quiet load for the convergence bound, so the last heal is checked.
	if err := drive.SleepCtx(ctx, robustBounds.Converge+time.Second); err != nil {
		return h, err
	}
	if rs.sched.Restore != "" {
		res, err := d.restoreEnsemble(ctx, rs, rs.sched.Restore) // restore.go
		h.Restore = &res
		if err != nil {
			return h, err
		}
	}
	for _, rc := range rs.recs {
		rc.Stop()
	}
	rs.recs = nil
	h.Truth, h.Gaps = rs.truth.Close()
	h.End = time.Now()
	h.Publishes = rs.pubs.all()
	for _, g := range d.groups {
		g.load.stop()
	}
	for _, p := range d.allProviders() {
		rs.stopping(p, "end")
	}
	drive.StopAll(procsOf(d.allProviders()), 15*time.Second)
	h.Executions = map[string]int{}
	for _, g := range d.groups {
		lg, err := readLedgers(g.ledgers)
		if err != nil {
			return h, err
		}
		for k, n := range lg.counts {
			h.Executions[k] = n
		}
		for _, s := range g.load.all() {
			h.Requests = append(h.Requests, history.Request{At: s.at, Done: s.done, Gateway: g.gateways[s.gateway].id,
				Instance: s.instance, Post: s.post, Key: s.key, Failed: s.failed, Reason: s.reason, NoRetry: s.noRetry})
		}
	}
	rs.mu.Lock()
	h.Runs, h.Blinds, h.Heals, h.Crashes = slices.Clone(rs.runs), slices.Clone(rs.blinds), slices.Clone(rs.heals), slices.Clone(rs.crashes)
	h.Stops, h.Writes, h.Guards, h.Sick = slices.Clone(rs.stops), slices.Clone(rs.writes), slices.Clone(rs.guards), slices.Clone(rs.sick)
	h.Ready, h.Calls = slices.Clone(rs.ready), slices.Clone(rs.calls)
	rs.mu.Unlock()
	return h, nil
}

func roundString(rd round) string {
	var ss []string
	for _, st := range rd.Steps {
		ss = append(ss, st.String())
	}
	return strings.Join(ss, " ")
}

// startRecorders starts the in-process consumers, each behind a proxy of
// its own, and the bursts' client with its steady registrations.
func (d *driver) startRecorders(ctx context.Context, rs *robustState, services []string) error {
	proxy := func() (*zkProxy, error) {
		px, err := d.newProxy()
		if err == nil {
			rs.proxies = append(rs.proxies, px)
		}
		return px, err
	}
	for _, kind := range []string{"instancer", "catalog", "resolver"} {
		px, err := proxy()
		if err != nil {
			return err
		}
		var rec recorder
		if kind == "resolver" {
			rec, err = newResolverRecorder(ctx, kind, px.ConnectString(), d.basePath, services, robustTimeout, &rs.pubs, d.sdOptions()...)
		} else {
			rec, err = newInstancerRecorder(kind, px.ConnectString(), d.basePath, services, robustTimeout, kind == "catalog", false, &rs.pubs, d.sdOptions()...)
		}
		if err != nil {
			return fmt.Errorf("%s recorder: %w", kind, err)
		}
		rs.recs = append(rs.recs, rec)
		rs.targets = append(rs.targets, target{name: kind, proxy: px})
	}
	if d.cfg.broken {
		px, err := proxy()
		if err != nil {
			return err
		}
		rec, err := newInstancerRecorder("broken-ignores-deletions", px.ConnectString(), d.basePath, services, robustTimeout, false, true, &rs.pubs, d.sdOptions()...)
		if err != nil {
			return err
		}
		rs.recs = append(rs.recs, rec)
		rs.targets = append(rs.targets, target{name: rec.Name(), proxy: px})
	}
	for _, gw := range d.allGateways() {
		rs.targets = append(rs.targets, target{name: gw.id, proxy: gw.gwProxy})
	}
	px, err := proxy()
	if err != nil {
		return err
	}
	c, err := sd.NewClient(px.ConnectString(), append(d.sdOptions(), sd.SessionTimeout(robustTimeout))...)
	if err != nil {
		return err
	}
	rs.bursts = &burstClient{c: c, proxy: px, base: d.basePath, port: 40000}
	for i := 1; i <= 2; i++ {
		reg, err := rs.bursts.registrar(fmt.Sprintf("steady-%d", i))
		if err != nil {
			return err
		}
		if err := d.register(ctx, rs, reg); err != nil {
			return err
		}
		rs.bursts.steady = append(rs.bursts.steady, reg)
	}
	return nil
}

// register registers reg and notes its run.
func (d *driver) register(ctx context.Context, rs *robustState, reg *sd.Registrar) error {
	rs.mu.Lock()
	rs.runs = append(rs.runs, history.Run{Service: burstService, ID: reg.Instance().ID, Path: reg.Path(), Start: time.Now()})
	rs.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, checkRecovered)
	defer cancel()
	sent := time.Now()
	err := reg.RegisterContext(ctx)
	if err == nil {
		rs.wrote("register", reg.Path(), history.WantUp, sent)
	}
	if err != nil && ctx.Err() == nil {
		// Given time, a registration waits out an outage: one that
		// returns early is the library's finding, not the schedule's.
		dl, _ := ctx.Deadline()
		rs.violation("registration", fmt.Sprintf("sd.Registrar.RegisterContext of %s returned with %v of its ctx left: %v",
			reg.Path(), time.Until(dl).Round(time.Millisecond), err))
		return nil
	}
	return err
}

func (d *driver) deregister(ctx context.Context, rs *robustState, reg *sd.Registrar) error {
	rs.mu.Lock()
	for i := range rs.runs {
		if rs.runs[i].Path == reg.Path() && rs.runs[i].Stopping.IsZero() {
			rs.runs[i].Stopping, rs.runs[i].How = time.Now(), "deregister"
		}
	}
	rs.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, checkRecovered)
	defer cancel()
	sent := time.Now()
	err := reg.DeregisterContext(ctx)
	if err == nil {
		rs.wrote("deregister", reg.Path(), history.WantAbsent, sent)
	}
	return err
}

// wrote notes a write acknowledged now, sent at sent.
func (rs *robustState) wrote(op, path, want string, sent time.Time) {
	rs.mu.Lock()
	rs.writes = append(rs.writes, history.Written{Op: op, Path: path, Want: want, Sent: sent, Acked: time.Now()})
	rs.mu.Unlock()
}

// waitRoutedAll waits until g's gateways answered with every provider for
// a request sent after heal.
func (d *driver) waitRoutedAll(ctx context.Context, g *group, heal time.Time) error {
	deadline := time.Now().Add(checkRecovered)
	for !g.load.routedSince(g.routeAll(heal)) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%sthe gateways did not route to every provider within %v of the heal", g.tag(), checkRecovered)
		}
		if err := drive.SleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// retry calls f until it succeeds, for at most checkRecovered: ZooKeeper
// may be down or electing under another fault of the round.
func retry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(checkRecovered)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		if err := drive.SleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// robustStep runs one fault of a schedule, until it ended.
func (d *driver) robustStep(ctx context.Context, rs *robustState, st step, round int) error {
	logf("round %d: %s", round+1, st)
	if done, err := d.robustStepMore(ctx, rs, st, round); done { // faults.go
		return err
	}
	switch st.Kind {
	case kBlackholeShort, kBlackholeLong, kResetShort, kResetLong:
		t := rs.targets[st.Slot%len(rs.targets)]
		from := time.Now()
		if st.Kind == kBlackholeShort || st.Kind == kBlackholeLong {
			t.proxy.Blackhole()
		} else {
			t.proxy.Cut()
		}
		err := drive.SleepCtx(ctx, st.For)
		t.proxy.Heal()
		rs.blind(t.name, from, st.Kind)
		return err
	case kExpireConsumer:
		t := rs.targets[st.Slot%len(rs.targets)]
		return d.expireAll(ctx, t.proxy)
	case kLeader:
		var leader *zktest.Server
		if err := retry(ctx, func() (err error) { leader, err = d.cluster.Leader(); return err }); err != nil {
			return err
		}
		if err := leader.Kill(); err != nil {
			return err
		}
		err := drive.SleepCtx(ctx, st.For)
		if rerr := d.cluster.Restart(leader); rerr != nil {
			return rerr
		}
		return err
	case kMember:
		m := d.cluster.Servers[st.Slot%len(d.cluster.Servers)]
		if err := m.Stop(); err != nil {
			return err
		}
		err := drive.SleepCtx(ctx, st.For)
		if rerr := d.cluster.Restart(m); rerr != nil {
			return rerr
		}
		return err
	case kEnsemble:
		from := time.Now()
		if err := d.cluster.StopAll(); err != nil {
			return err
		}
		err := drive.SleepCtx(ctx, st.For)
		if serr := d.cluster.StartAll(); serr != nil {
			return serr
		}
		rs.blind("*", from, st.Kind)
		return err
	case kExpireProvider:
		if st.Slot >= nProviders {
			id := rs.bursts.c.SessionID()
			return retry(ctx, func() error {
				m, err := d.servingMember()
				if err != nil {
					return err
				}
				return rs.bursts.proxy.Expire(d.memberAddr(m), id)
			})
		}
		g := d.groups[st.Group%len(d.groups)]
		p := g.providers[st.Slot]
		return retry(ctx, func() error {
			owner, err := d.reader.owner(d.nodePaths(g)[p.id])
			if err != nil {
				return err
			}
			m, err := d.servingMember()
			if err != nil {
				return err
			}
			return p.proxy.Expire(d.memberAddr(m), owner)
		})
	case kSigterm:
		g := d.groups[st.Group%len(d.groups)]
		p := g.providers[st.Slot]
		rs.stopping(p, "sigterm")
		sig := time.Now()
		if killed := p.proc.Stop(syscall.SIGTERM, d.cfg.stopLimit); killed {
			return fmt.Errorf("%s did not stop within %v of SIGTERM; its log %s ends with:\n%s", p.id, d.cfg.stopLimit, p.proc.LogPath(), drive.Tail(p.proc.LogPath(), 20))
		}
		if err := rs.stopped(d, p, sig); err != nil {
			return err
		}
		return d.restart(ctx, rs, p)
	case kKill:
		g := d.groups[st.Group%len(d.groups)]
		p := g.providers[st.Slot]
		addr, killAt := p.addr(), time.Now()
		rs.stopping(p, "kill")
		p.proc.Signal(syscall.SIGKILL)
		<-p.proc.Done()
		rs.mu.Lock()
		rs.crashes = append(rs.crashes, history.Crash{Addr: addr, KillAt: killAt, DeadAt: p.proc.ExitedAt()})
		rs.mu.Unlock()
		paths := map[string]string{p.id: d.nodePaths(g)[p.id]}
		if _, _, err := d.reader.waitCzxids(ctx, paths, checkRecovered, func(m map[string]int64) bool { return m[p.id] == 0 }); err != nil {
			return fmt.Errorf("the node of the killed %s did not go within %v: %w", p.id, checkRecovered, err)
		}
		return d.restart(ctx, rs, p)
	case kHealth:
		g := d.groups[st.Group%len(d.groups)]
		p := g.providers[st.Slot]
		f := p.vars["PROVIDER_HEALTH_FILE"]
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			return err
		}
		sick := history.Sick{Service: p.service, ID: p.id, Path: d.nodePaths(g)[p.id], From: time.Now(), Detect: healthDetect,
			ZKFault: rs.ensembleFaultIn(round)}
		err := drive.SleepCtx(ctx, st.For)
		sick.To = time.Now()
		rs.mu.Lock()
		rs.sick = append(rs.sick, sick)
		rs.mu.Unlock()
		if rerr := os.Remove(f); rerr != nil {
			return rerr
		}
		return err
	case kDrain:
		g := d.groups[st.Group%len(d.groups)]
		p := g.providers[st.Slot]
		path := d.nodePaths(g)[p.id]
		sent := time.Now()
		if err := retry(ctx, func() error { return d.reader.drain(p.service, path, false) }); err != nil {
			return err
		}
		rs.wrote("drain", path, history.WantOut, sent)
		err := drive.SleepCtx(ctx, st.For)
		sent = time.Now()
		if uerr := retry(context.Background(), func() error { return d.reader.drain(p.service, path, true) }); uerr != nil {
			return uerr
		}
		rs.wrote("undrain", path, history.WantUp, sent)
		return err
	case kFlips:
		reg := rs.bursts.steady[st.Slot%len(rs.bursts.steady)]
		for i := range st.N {
			status := sd.StatusOutOfService
			if i%2 == 1 {
				status = sd.StatusUp
			}
			sent := time.Now()
			if err := setStatus(ctx, reg, status); err != nil {
				return err
			}
			want := history.WantOut
			if status == sd.StatusUp {
				want = history.WantUp
			}
			rs.wrote("set-status", reg.Path(), want, sent)
			if err := drive.SleepCtx(ctx, st.For); err != nil {
				return err
			}
		}
		return setStatus(ctx, reg, sd.StatusUp)
	case kBurst:
		var regs []*sd.Registrar
		var errs []error
		for k := range st.N {
			reg, err := rs.bursts.registrar(fmt.Sprintf("burst-r%d-%d", round+1, k+1))
			if err != nil {
				return err
			}
			if err := d.register(ctx, rs, reg); err != nil {
				errs = append(errs, err)
			}
			regs = append(regs, reg)
		}
		if err := drive.SleepCtx(ctx, st.For); err != nil {
			return err
		}
		for _, reg := range regs {
			if err := d.deregister(ctx, rs, reg); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	return fmt.Errorf("unknown fault %q", st.Kind)
}

// ensembleFaultIn tells whether round has a fault of the ensemble (a
// member, the leader, all of it, a lagging member): writes may wait it out.
func (rs *robustState) ensembleFaultIn(round int) bool {
	if round < 0 || round >= len(rs.sched.Rounds) {
		return false
	}
	return slices.ContainsFunc(rs.sched.Rounds[round].Steps, func(st step) bool {
		return slices.Contains([]string{kLeader, kMember, kEnsemble, kLag}, st.Kind)
	})
}

// restart starts provider p again, on a new port, and waits until it is
// ready. One that exits on its own first is a violation, and is started
// once more, so that the rest of the schedule still has it.
func (d *driver) restart(ctx context.Context, rs *robustState, p *instance) error {
	for try := 0; ; try++ {
		if err := d.startInstance(p); err != nil {
			return err
		}
		err := d.waitStarted(ctx, p)
		if err == nil || !p.proc.Exited() || try == 1 || ctx.Err() != nil {
			return err
		}
		rs.stopping(p, "exited")
		rs.violation("provider", fmt.Sprintf("%s exited (%s) before it was ready; its log %s ends with:\n%s",
			p.id, p.proc.ExitString(), p.proc.LogPath(), drive.Tail(p.proc.LogPath(), 8)))
	}
}

func setStatus(ctx context.Context, reg *sd.Registrar, s sd.Status) error {
	ctx, cancel := context.WithTimeout(ctx, checkRecovered)
	defer cancel()
	return reg.SetStatus(ctx, s)
}

// expireAll expires every session px carried that is connected to a
// member now, waiting for one while they reconnect (a member restarting).
func (d *driver) expireAll(ctx context.Context, px *zkProxy) error {
	n := 0
	err := retry(ctx, func() error {
		m, err := d.servingMember()
		if err != nil {
			return err
		}
		var live []int64
		for _, s := range d.cluster.Servers {
			if ids, err := s.Sessions(); err == nil {
				live = append(live, ids...)
			}
		}
		for _, id := range px.Sessions() {
			if slices.Contains(live, id) && px.Expire(d.memberAddr(m), id) == nil {
				n++
			}
		}
		if n == 0 {
			return errors.New("no session of the consumer is connected")
		}
		return nil
	})
	logf("expired %d sessions", n)
	return err
}

// stopReport is the part of a provider's STOPREPORT line the history
// keeps (examples/provider StopReport).
type stopReport struct {
	Mode           string    `json:"mode"`
	Instance       string    `json:"instance"`
	OutAt          time.Time `json:"out_at"`
	DeregisteredAt time.Time `json:"deregistered_at"`
	Acks           []struct {
		Target string    `json:"target"`
		Acked  bool      `json:"acked"`
		At     time.Time `json:"at"`
	} `json:"acks"`
}

// stopped reads the STOPREPORT that p's run, stopped by SIGTERM at sig,
// printed last in its log, and notes the stop with each flush target
// named by the gateway listening on its port.
func (rs *robustState) stopped(d *driver, p *instance, sig time.Time) error {
	b, err := os.ReadFile(p.proc.LogPath())
	if err != nil {
		return err
	}
	i := bytes.LastIndex(b, []byte("STOPREPORT "))
	if i < 0 {
		return fmt.Errorf("%s stopped by SIGTERM printed no STOPREPORT; its log %s ends with:\n%s", p.id, p.proc.LogPath(), drive.Tail(p.proc.LogPath(), 20))
	}
	line, _, _ := bytes.Cut(b[i+len("STOPREPORT "):], []byte("\n"))
	var rep stopReport
	if err := json.Unmarshal(line, &rep); err != nil {
		return fmt.Errorf("%s's STOPREPORT %q: %w", p.id, line, err)
	}
	byPort := map[string]string{}
	for _, gw := range d.allGateways() {
		byPort[strconv.Itoa(gw.port)] = gw.id
	}
	st := history.Stop{Service: p.service, ID: p.id, Signal: sig, Out: rep.OutAt, Deregistered: rep.DeregisteredAt}
	for _, a := range rep.Acks {
		ack := history.Ack{Target: a.Target, Acked: a.Acked, At: a.At}
		if u, err := url.Parse(a.Target); err == nil {
			ack.Gateway = byPort[u.Port()]
		}
		st.Acks = append(st.Acks, ack)
	}
	rs.mu.Lock()
	rs.stops = append(rs.stops, st)
	rs.mu.Unlock()
	return nil
}
