// Command rollout is the driver of `make demo`: it builds the example
// provider and gateway, starts a local ZooKeeper (unless GRACEKIT_ZK_SERVERS
// names one), then, once with gracekit as designed ("graceful") and once the
// way teams do it today ("naive"), runs 2 gateways and 3 providers, sends
// steady load through the gateways and restarts every provider in turn. It
// prints a table per mode and, last, one RESULT line per mode:
//
//	RESULT mode=<graceful|naive> requests=<n> failed=<n> p99_ms=<x> max_stop_ms=<x>
//
// (followed by " invalid=1" when the mode's run does not show what it should;
// see below).
//
// It exits 1 when graceful mode failed any request, or when a mode is
// invalid: the load ended (at its time or count bound) before every provider
// had been restarted and routed to again, so that some restart happened
// without load; stderr says which. It leaves no process behind: children
// run in their own process groups with Pdeathsig, and every exit path,
// Ctrl-C included, kills them and stops ZooKeeper. Child output goes to log
// files in a temporary directory, printed on failure.
//
// Every run uses its own ZooKeeper base path, /gracekit-demo-<random hex>,
// given to every child as GRACEKIT_BASE_PATH, so that a shared ZooKeeper
// (GRACEKIT_ZK_SERVERS) never mixes the demo's instances with real ones;
// the driver deletes nodes only below that path, and deletes the path
// itself at the end. The gateways get GATEWAY_LOOPBACK_ONLY=1: they refuse
// any instance whose address is not a loopback address.
//
// The processes talk to the driver as examples/CONTRACT.md says. Flags:
//
//	-modes graceful,naive  modes to run, in order
//	-workers 20            concurrent load workers (alternating gateways)
//	-requests 5000         minimum requests per mode (20% POST /api/orders)
//	-latency 50ms          PROVIDER_LATENCY
//	-bindir DIR            use prebuilt provider and gateway binaries
//	-keep                  keep the temporary directory on success
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gracekit/gracekit/zktest"
)

const (
	pkgProvider = "github.com/gracekit/gracekit/examples/provider"
	pkgGateway  = "github.com/gracekit/gracekit/examples/gateway"

	providerService = "quote"
	gatewayService  = "gateway"
	// basePathPrefix starts the run's own base path (CONTRACT.md); the
	// driver never deletes a node outside such a path.
	basePathPrefix = "/gracekit-demo-"
	nProviders     = 3
	nGateways      = 2
)

type config struct {
	modes       []string
	workers     int
	minRequests int64
	maxRequests int64
	latency     time.Duration
	preRoll     time.Duration // load before the first restart
	postRoll    time.Duration // load after the last restart, at least
	loadLimit   time.Duration // hard bound on a mode's load
	stopLimit   time.Duration // SIGTERM to SIGKILL
	readyLimit  time.Duration // start to /readyz 200
	reqTimeout  time.Duration
	keep        bool
	binDir      string // prebuilt provider and gateway, instead of building
}

func main() { os.Exit(run()) }

var start = time.Now()

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[rollout %5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

func parseFlags() config {
	c := config{preRoll: 2 * time.Second, postRoll: 2 * time.Second, loadLimit: 75 * time.Second,
		stopLimit: 20 * time.Second, readyLimit: 30 * time.Second, reqTimeout: 10 * time.Second}
	modes := flag.String("modes", "graceful,naive", "modes to run, in order")
	flag.IntVar(&c.workers, "workers", 20, "concurrent load workers")
	flag.Int64Var(&c.minRequests, "requests", 5000, "minimum requests per mode")
	flag.DurationVar(&c.latency, "latency", 50*time.Millisecond, "PROVIDER_LATENCY given to the providers")
	flag.StringVar(&c.binDir, "bindir", "", "use the provider and gateway binaries in this directory instead of building them")
	flag.BoolVar(&c.keep, "keep", false, "keep the temporary directory (binaries, logs) even on success")
	flag.Parse()
	for m := range strings.SplitSeq(*modes, ",") {
		if m = strings.TrimSpace(m); m != "" {
			c.modes = append(c.modes, m)
		}
	}
	c.maxRequests = max(10*c.minRequests, 50000)
	return c
}

func run() (code int) {
	cfg := parseFlags()
	for _, m := range cfg.modes {
		if m != "graceful" && m != "naive" {
			fmt.Fprintf(os.Stderr, "rollout: unknown mode %q (want graceful or naive)\n", m)
			return 2
		}
	}
	if os.Getenv("GRACEKIT_ZK_SERVERS") == "" {
		if _, _, err := zktest.Runtime(); err != nil {
			fmt.Fprintln(os.Stderr, "rollout:", err) // says how to install it
			return 1
		}
	}
	tmp, err := os.MkdirTemp("", "gracekit-demo-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "rollout:", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := &driver{cfg: cfg, tmp: tmp, sup: newSupervisor(), basePath: basePathPrefix + randomHex(8)}

	// Ctrl-C or SIGTERM: stop the scenario and kill every child at once; a
	// second signal exits without waiting for anything else.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	quit := make(chan struct{})
	var sigWG sync.WaitGroup
	sigWG.Add(1)
	go func() {
		defer sigWG.Done()
		select {
		case sig := <-sigs:
			logf("%v: stopping every process", sig)
			d.interrupted.Store(true)
			cancel()
			d.sup.KillAll()
		case <-quit:
			return
		}
		select {
		case <-sigs:
			d.sup.KillAll()
			external := d.closeZK()
			fmt.Fprintf(os.Stderr, "rollout: interrupted again; logs in %s\n", tmp)
			if external {
				fmt.Fprintf(os.Stderr, "rollout: the ZooKeeper path %s may be left behind\n", d.basePath)
			}
			os.Exit(130)
		case <-quit:
		}
	}()

	defer func() {
		// Every exit path: no child, no ZooKeeper left behind.
		close(quit)
		sigWG.Wait()
		signal.Stop(sigs)
		d.sup.KillAll()
		d.removeBasePath()
		d.closeZK()
		if d.interrupted.Load() {
			code = 130
		}
		if code != 0 || cfg.keep {
			if d.keptNoted {
				return
			}
			fmt.Fprintf(os.Stderr, "rollout: binaries and logs are in %s\n", tmp)
		} else {
			_ = os.RemoveAll(tmp)
		}
	}()

	results, err := d.run(ctx)
	if err != nil {
		if d.interrupted.Load() {
			return 130
		}
		fmt.Fprintln(os.Stderr, "rollout:", err)
		return 1
	}
	for _, r := range results {
		writeTable(os.Stdout, r)
	}
	code = 0
	for _, r := range results {
		if r.Invalid != "" {
			fmt.Fprintf(os.Stderr, "rollout: mode %s is invalid: %s; binaries and logs are in %s\n", r.Mode, r.Invalid, tmp)
			d.keptNoted = true
			code = 1
		}
		if r.Mode == "graceful" && r.Failed > 0 {
			fmt.Fprintf(os.Stderr, "rollout: graceful mode failed %d of %d requests; binaries and logs are in %s\n", r.Failed, r.Requests, tmp)
			d.keptNoted = true
			code = 1
		}
	}
	// Last, the machine-readable lines.
	for _, r := range results {
		fmt.Println(resultLine(r))
	}
	return code
}

type driver struct {
	cfg         config
	tmp         string
	sup         *supervisor
	basePath    string // this run's base path: basePathPrefix + random hex
	interrupted atomic.Bool

	zkMu      sync.Mutex
	zkCluster *zktest.Cluster
	zkConnect string
	zkUsed    bool // a child was started: the base path may exist
	bins      map[string]string
	keptNoted bool // the logs directory was already printed
}

// closeZK stops the local ZooKeeper, if the driver started one. It
// reports whether the ZooKeeper used is an external one.
func (d *driver) closeZK() (external bool) {
	d.zkMu.Lock()
	defer d.zkMu.Unlock()
	if d.zkCluster != nil {
		_ = d.zkCluster.Close()
		d.zkCluster = nil
		return false
	}
	return d.zkConnect != ""
}

// removeBasePath deletes the run's base path and everything below it, once
// every child has ended. It only warns on failure.
func (d *driver) removeBasePath() {
	d.zkMu.Lock()
	connect, used := d.zkConnect, d.zkUsed
	d.zkMu.Unlock()
	if !used || connect == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := deleteTree(ctx, connect, d.basePath); err != nil {
		logf("warning: removing %s from ZooKeeper: %v", d.basePath, err)
	}
}

func (d *driver) run(ctx context.Context) ([]*modeResult, error) {
	if err := d.build(ctx); err != nil {
		return nil, err
	}
	if err := d.startZK(ctx); err != nil {
		return nil, err
	}
	var results []*modeResult
	for _, mode := range d.cfg.modes {
		r, err := d.runMode(ctx, mode)
		if err != nil {
			return nil, fmt.Errorf("mode %s: %w", mode, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// build compiles the provider and the gateway once, into the temp dir.
func (d *driver) build(ctx context.Context) error {
	if d.cfg.binDir != "" {
		d.bins = map[string]string{
			providerService: filepath.Join(d.cfg.binDir, "provider"),
			gatewayService:  filepath.Join(d.cfg.binDir, "gateway"),
		}
		return nil
	}
	bin := filepath.Join(d.tmp, "bin") + string(filepath.Separator)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	logf("building examples/provider and examples/gateway")
	cmd := exec.CommandContext(ctx, goCmd, "build", "-o", bin, pkgProvider, pkgGateway)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s %s: %w", pkgProvider, pkgGateway, err)
	}
	d.bins = map[string]string{
		providerService: filepath.Join(bin, "provider"),
		gatewayService:  filepath.Join(bin, "gateway"),
	}
	return nil
}

func (d *driver) startZK(ctx context.Context) error {
	if s := os.Getenv("GRACEKIT_ZK_SERVERS"); s != "" {
		d.zkMu.Lock()
		d.zkConnect = s
		d.zkMu.Unlock()
		logf("using ZooKeeper at %s (GRACEKIT_ZK_SERVERS)", s)
		return nil
	}
	logf("starting a local ZooKeeper (zktest)")
	c, err := zktest.Start(filepath.Join(d.tmp, "zookeeper"))
	if err != nil {
		if errors.Is(err, zktest.ErrNotInstalled) {
			return err // its message is the install command
		}
		return fmt.Errorf("start ZooKeeper: %w", err)
	}
	d.zkMu.Lock()
	d.zkCluster, d.zkConnect = c, c.ConnectString()
	d.zkMu.Unlock()
	if ctx.Err() != nil { // interrupted while the JVM started
		d.closeZK()
		return ctx.Err()
	}
	logf("ZooKeeper serves at %s", d.zkConnect)
	return nil
}

// instance is one provider or gateway slot: its id and port are stable
// across restarts.
type instance struct {
	service string
	id      string
	port    int
	env     []string
	runs    int
	proc    *proc
}

func (in *instance) url(path string) string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(in.port)) + path
}

func (d *driver) startInstance(mode, dir string, in *instance) error {
	in.runs++
	logPath := filepath.Join(dir, fmt.Sprintf("%s.run%d.log", in.id, in.runs))
	p, err := d.sup.start(in.id, d.bins[in.service], []string{"-mode", mode}, in.env, logPath)
	if err != nil {
		return err
	}
	in.proc = p
	return nil
}

func (d *driver) runMode(ctx context.Context, mode string) (res *modeResult, err error) {
	cfg := d.cfg
	dir := filepath.Join(d.tmp, mode)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logf("=== mode %s (logs in %s)", mode, dir)

	var providers, gateways []*instance
	for i := 1; i <= nGateways; i++ {
		gateways = append(gateways, &instance{service: gatewayService, id: fmt.Sprintf("%s-%d", gatewayService, i)})
	}
	for i := 1; i <= nProviders; i++ {
		providers = append(providers, &instance{service: providerService, id: fmt.Sprintf("%s-%d", providerService, i)})
	}
	var stale []string
	for _, in := range slices.Concat(gateways, providers) {
		stale = append(stale, d.basePath+"/"+in.service+"/"+in.id)
	}
	// A previous mode may have left nodes of killed processes (only in this
	// run's own base path).
	if err := deleteNodes(ctx, d.zkConnect, d.basePath, stale...); err != nil {
		logf("warning: cleaning old instance nodes: %v", err)
	}

	ports, err := zktest.FreePorts(nProviders + nGateways)
	if err != nil {
		return nil, err
	}
	secret := randomHex(32)
	for i, in := range slices.Concat(gateways, providers) {
		in.port = ports[i]
		vars := map[string]string{
			"GRACEKIT_ZK_SERVERS":   d.zkConnect,
			"GRACEKIT_BASE_PATH":    d.basePath,
			"GRACEKIT_SERVICE":      in.service,
			"GRACEKIT_INSTANCE_ID":  in.id,
			"GRACEKIT_ADDRESS":      "127.0.0.1",
			"GRACEKIT_PORT":         strconv.Itoa(in.port),
			"GRACEKIT_FLUSH_SECRET": secret,
		}
		if in.service == gatewayService {
			vars["GATEWAY_UPSTREAM"] = providerService
			vars["GATEWAY_LOOPBACK_ONLY"] = "1" // only ever the demo's own providers
		} else {
			vars["GRACEKIT_FLUSH_GATEWAYS"] = gatewayService
			vars["PROVIDER_LATENCY"] = cfg.latency.String()
		}
		in.env = childEnv(os.Environ(), vars)
	}

	// Whatever happens, end this mode's processes: providers first (a
	// graceful provider flushes the gateways as it stops), then gateways.
	defer func() {
		procsOf := func(ins []*instance) []*proc {
			var ps []*proc
			for _, in := range ins {
				ps = append(ps, in.proc)
			}
			return ps
		}
		d.sup.stopAll(procsOf(providers), 10*time.Second)
		d.sup.stopAll(procsOf(gateways), 10*time.Second)
	}()

	d.zkMu.Lock()
	d.zkUsed = true
	d.zkMu.Unlock()
	for _, in := range slices.Concat(gateways, providers) {
		if err := d.startInstance(mode, dir, in); err != nil {
			return nil, err
		}
	}
	logf("[%s] started %d gateways and %d providers; waiting for /readyz", mode, nGateways, nProviders)
	for _, in := range slices.Concat(providers, gateways) {
		if err := waitReady(ctx, in, cfg.readyLimit); err != nil {
			return nil, err
		}
	}
	gwURLs := make([]string, len(gateways))
	for i, gw := range gateways {
		gwURLs[i] = gw.url("")
		if err := waitRoutes(ctx, gw, nProviders, cfg.readyLimit); err != nil {
			return nil, err
		}
	}
	logf("[%s] all ready; load: %d workers, ≥%d requests, 20%% POST /api/orders", mode, cfg.workers, cfg.minRequests)

	ld := newLoad(gwURLs, cfg.workers, cfg.maxRequests, cfg.reqTimeout, time.Now().Add(cfg.loadLimit))
	ld.run(ctx)
	defer ld.stop()
	if err := sleepCtx(ctx, cfg.preRoll); err != nil {
		return nil, err
	}
	loadStart := ld.started

	res = &modeResult{Mode: mode, Workers: cfg.workers, Gateways: nGateways, Latency: cfg.latency}
	type window struct{ from, to time.Time }
	windows := make([]window, len(providers))
	for i, in := range providers {
		// Spread the restarts over the run: the i-th waits for its share of
		// the requests (it never waits when stops are slower than that).
		due := int64(i+1) * cfg.minRequests / int64(len(providers)+1)
		for ld.completed.Load() < due && time.Since(loadStart) < cfg.loadLimit/2 {
			if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
				return nil, err
			}
		}
		if ld.finished() {
			// A restart now would happen with no load to show its effect.
			res.Invalid = fmt.Sprintf("the load reached its bound (%d requests, %.1fs) before %s was stopped",
				ld.completed.Load(), time.Since(loadStart).Seconds(), in.id)
			logf("[%s] %s: no more restarts", mode, res.Invalid)
			break
		}
		old := in.proc
		sigAt := time.Now()
		logf("[%s] SIGTERM %s (%d requests so far, %d failed)", mode, in.id, ld.completed.Load(), ld.fails.Load())
		killed := old.stop(syscall.SIGTERM, cfg.stopLimit)
		st := stopResult{ID: in.id, Wall: old.exitedAt.Sub(sigAt), Killed: killed, Exit: old.exitString()}
		rep, rerr := stopReportFile(old.logPath)
		st.Report = rep
		switch {
		case rerr != nil:
			st.ReportErr = rerr.Error()
		case rep == nil:
			st.ReportErr = "no STOPREPORT line on stdout; stop time is the wall time (see " + old.logPath + ")"
		}
		if killed {
			logf("[%s] %s did not exit within %v: killed", mode, in.id, cfg.stopLimit)
			if err := deleteNodes(ctx, d.zkConnect, d.basePath, d.basePath+"/"+in.service+"/"+in.id); err != nil {
				logf("warning: %v", err)
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		logf("[%s] %s exited (%s) after %.0fms; starting it again", mode, in.id, st.Exit, ms(st.Wall))
		if err := d.startInstance(mode, dir, in); err != nil {
			return nil, err
		}
		if err := waitReady(ctx, in, cfg.readyLimit); err != nil {
			return nil, err
		}
		readyAt := time.Now()
		st.BackReady = readyAt.Sub(sigAt)
		// Like a rollout with maxUnavailable=1: go on once the gateways
		// route to the new process (bounded; the load tells us).
		back := readyAt
		for deadline := readyAt.Add(10 * time.Second); !ld.seenSince(in.id, readyAt); {
			if ld.ended() {
				break // no request will be sent any more; checked below
			}
			if time.Now().After(deadline) {
				logf("[%s] warning: the gateways did not route to %s within 10s of /readyz", mode, in.id)
				break
			}
			if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
				return nil, err
			}
			back = time.Now()
		}
		windows[i] = window{sigAt, back}
		res.Stops = append(res.Stops, st)
		if !ld.seenSince(in.id, readyAt) && ld.ended() {
			// The restart was not seen through: the load stopped first.
			res.Invalid = fmt.Sprintf("the load reached its bound (%d requests, %.1fs) before the gateways routed to %s again",
				ld.completed.Load(), time.Since(loadStart).Seconds(), in.id)
			logf("[%s] %s", mode, res.Invalid)
			break
		}
		logf("[%s] %s ready again after %.0fms, routed after %.0fms", mode, in.id, ms(st.BackReady), ms(back.Sub(sigAt)))
	}

	post := time.Now()
	for res.Invalid == "" && (time.Since(post) < cfg.postRoll || ld.completed.Load() < cfg.minRequests) {
		if ld.finished() {
			logf("[%s] warning: the load stopped at its bound with %d requests", mode, ld.completed.Load())
			break
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
	ld.stop()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	res.Retries = scrapeRetries(gateways)
	samples := ld.all()
	res.summarize(samples, ld.stoppedAt.Sub(ld.started))
	for i := range res.Stops {
		res.Stops[i].FailedDuring = failedBetween(samples, windows[i].from, windows[i].to)
	}
	logf("[%s] done: %d requests, %d failed", mode, res.Requests, res.Failed)
	return res, nil
}

// waitReady polls the instance's /readyz until it answers 200.
func waitReady(ctx context.Context, in *instance, limit time.Duration) error {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	deadline := time.Now().Add(limit)
	for {
		if in.proc.exited() {
			return fmt.Errorf("%s exited (%s) before it was ready; its log %s ends with:\n%s",
				in.id, in.proc.exitString(), in.proc.logPath, tail(in.proc.logPath, 15))
		}
		if resp, err := client.Get(in.url("/readyz")); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: /readyz not 200 within %v; its log %s ends with:\n%s",
				in.id, limit, in.proc.logPath, tail(in.proc.logPath, 15))
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitRoutes sends GET /api/quote through the gateway until it answers 200
// and has named every provider (or, when responses name none, answered 200
// many times).
func waitRoutes(ctx context.Context, gw *instance, providers int, limit time.Duration) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	seen := map[string]bool{}
	ok := 0
	last := ""
	deadline := time.Now().Add(limit)
	for {
		resp, err := client.Get(gw.url("/api/quote?symbol=ABC"))
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ok++
				if id := instanceOf(body); id != "" {
					seen[id] = true
				}
			} else {
				last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, shorten(string(body), 200))
			}
		} else {
			last = err.Error()
		}
		if len(seen) >= providers || (len(seen) == 0 && ok >= 30) {
			return nil
		}
		if time.Now().After(deadline) {
			if ok > 0 {
				logf("warning: %s routed %d requests but named only %d of %d providers", gw.id, ok, len(seen), providers)
				return nil
			}
			return fmt.Errorf("%s: GET /api/quote never answered 200 within %v (last: %s); its log %s ends with:\n%s",
				gw.id, limit, last, gw.proc.logPath, tail(gw.proc.logPath, 15))
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// childEnv is base without any variable the demo sets itself (GRACEKIT_*,
// PROVIDER_*, GATEWAY_*), plus vars, in a stable order.
func childEnv(base []string, vars map[string]string) []string {
	var env []string
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GRACEKIT_") || strings.HasPrefix(k, "PROVIDER_") || strings.HasPrefix(k, "GATEWAY_") {
			continue
		}
		if _, ok := vars[k]; ok {
			continue
		}
		env = append(env, kv)
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		env = append(env, k+"="+vars[k])
	}
	return env
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "  (" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  | " + strings.Join(lines, "\n  | ")
}

// scrapeRetries sums the retries the gateways count in their /metrics; nil
// when none exposes them.
func scrapeRetries(gateways []*instance) map[string]float64 {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	var total map[string]float64
	for _, gw := range gateways {
		resp, err := client.Get(gw.url("/metrics"))
		if err != nil {
			continue
		}
		m := parseRetries(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		for k, v := range m {
			if total == nil {
				total = map[string]float64{}
			}
			total[k] += v
		}
	}
	return total
}
