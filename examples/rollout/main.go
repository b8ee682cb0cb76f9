// Command rollout is the driver of `make demo`: it builds the example
// provider, gateway and cached gateway, starts a local ZooKeeper (unless
// GRACEKIT_ZK_SERVERS names one), then, once with gracekit as designed
// ("graceful") and once the way teams do it today ("naive"), runs 3
// providers behind three consumers side by side, sends steady load through
// the consumers, restarts every provider in turn, and then kills one with
// SIGKILL. The consumers are gracekit's gateway, go-kit as documented (stock
// sd/zk Instancer, sd.NewEndpointer, lb.NewRoundRobin, lb.Retry), and a
// gateway that caches its list for 35 s like Spring Cloud LoadBalancer,
// which graceful providers flush through gracekit's Spring compatibility
// mode. The modes differ only in how providers stop: graceful runs the
// gracekit stop sequence, naive exits at once.
//
// Every POST /api/orders carries an Idempotency-Key; every provider appends
// the key of each order it executes to a ledger file (PROVIDER_LEDGER), so
// the driver counts orders executed twice. A restarted provider listens on
// a new port, as a new pod gets a new IP. It prints a table per mode, broken
// down by consumer, and, last, one RESULT line per mode:
//
//	RESULT mode=<graceful|naive> requests=<n> failed=<n> duplicated=<n> p99_ms=<x> max_stop_ms=<x> crash_failed=<n>
//
// (followed by " invalid=1" when the mode's run does not show what it
// should). failed leaves out, and crash_failed counts, the requests that
// failed because the provider was killed: in flight on it, or sent to its
// dead address afterwards by a consumer whose list still held it (the
// consumer's 502 names the address);
// duplicated leaves out orders the killed provider had started that a
// consumer re-sent (the table shows them as crash_resent).
//
// Then it runs the same for gRPC (-transport): gRPC-only providers
// (examples/provider -transport grpc: Quotes/Get and Quotes/PlaceOrder, the
// order's key in the idempotency-key metadata, the same ledger), the same
// rolling restart with a new port per restart and the same kill -9, behind
// three gateways (examples/gateway -transport grpc) that call them
// through gracekit's consumer with endpoint/grpcfactory and Retry
// ("gracekit"), go-kit's sd/zk, transport/grpc and lb.Retry as documented
// ("go-kit"; its ClientConns are closed once idle rather than at once,
// see examples/gateway), and a plain grpc-go ClientConn through grpcresolver with
// round_robin and health checking ("grpc-go"). The load and what counts as
// failed are the HTTP run's: a request the gateway answered other than 200.
// Its RESULT lines name the transport:
//
//	RESULT mode=<graceful|naive> transport=grpc requests=<n> failed=<n> duplicated=<n> p99_ms=<x> max_stop_ms=<x> crash_failed=<n>
//
// Last, over HTTP, the migrate scenario: 3 providers registered with
// go-kit's own sd/zk Registrar are replaced one by one with gracekit
// providers that also register for go-kit consumers
// (fxmodule.GoKitRegistration), under load from a stock go-kit sd/zk
// consumer and a gracekit one reading the mixed service (sd.MixedCodec);
// no kill. Then an operator drains one migrated provider under load (as
// gracekit drain does) and undrains it: no consumer may call it more than
// a second after the drain (gracekit's drops it at OUT_OF_SERVICE,
// go-kit's when the provider deletes its twin). It must print
//
//	RESULT mode=migrate requests=<n> failed=0 duplicated=0 p99_ms=<x> max_stop_ms=<x> crash_failed=0 drained_calls_gracekit=0 drained_calls_gokit=0
//
// Opt-in (-modes ...,outage; not in the default set, which must stay
// within two minutes on a small machine), the outage scenario of static
// stability (docs/STATIC-STABILITY.md), on a ZooKeeper of its own that it
// stops: under load through a gateway with GRACEKIT_SNAPSHOT_DIR,
// ZooKeeper is stopped; a second gateway starts fresh on the same
// directory and the first restarts, both serving the snapshot's set; a
// provider starts unregistered. ZooKeeper comes back: the gateways read
// it, the new provider registers and is ramped in by slow start, a
// provider restarts on a new port, and both gateways must route to the
// live set. It must print
//
//	RESULT mode=outage requests=<n> failed=0 duplicated=0 started_from_snapshot=<n> gateways=2 converged=2 late_registered=1 ramp_share_pct=<x> share_pct=<y> zk_down_s=<x> converge_ms=<x> p99_ms=<x>
//
// with started_from_snapshot at least 1 and ramp_share_pct (the new
// provider's share in the first half of its ramp) under 0.75 x share_pct
// (its share after the ramp).
//
// Before the RESULT lines it draws every mode's timeline in one SVG and
// prints REPORT svg=<path>.
//
// It exits 1 when graceful, migrate or outage mode failed or duplicated any request, when the
// outage mode did not show what it should (outageProblems), when
// naive mode showed no harm (failed + duplicated = 0), when gracekit's
// gateway executed an order twice, when an order answered OK is in no
// ledger, or when a mode is invalid: the load ended (at its time or count
// bound) before every provider had been restarted and routed to again, so
// that some restart happened without load; stderr says which. It leaves no
// process behind: children run in their own process groups with
// Pdeathsig, and every exit path, Ctrl-C included, kills them and stops
// ZooKeeper. Child output goes to log files in a temporary directory,
// printed on failure.
//
// Every run uses its own ZooKeeper base path, /gracekit-demo-<random hex>,
// given to every child as GRACEKIT_BASE_PATH, so that a shared ZooKeeper
// (GRACEKIT_ZK_SERVERS) never mixes the demo's instances with real ones;
// the driver deletes nodes only below that path, and deletes the path
// itself at the end. The consumers get GATEWAY_LOOPBACK_ONLY=1: they refuse
// any instance whose address is not a loopback address.
//
// The processes talk to the driver as examples/CONTRACT.md says. Flags:
//
//	-transport http,grpc   transports to run, in order, each in every mode
//	-modes graceful,naive,migrate,slowstart  modes to run, in order (migrate, slowstart, outage: HTTP only)
//	-workers 21            concurrent load workers (going round the consumers)
//	-requests 4000         minimum requests per mode (20% POST /api/orders)
//	-latency 50ms          PROVIDER_LATENCY
//	-reuse-ports           restart providers on their old port
//	-no-crash              skip the kill -9
//	-bindir DIR            use prebuilt provider, gateway and cachedgw binaries
//	-keep                  keep the temporary directory on success
//	-svg PATH              the timeline chart (default $TMPDIR/gracekit-demo.svg)
//	-outage-window 4s      outage: the gateways' slow start window
//	-outage-start-wait 1s  outage: GRACEKIT_SNAPSHOT_START_WAIT
//	-outage-hold 2s        outage: load through both snapshot-serving gateways before ZooKeeper returns
//	-outage-converge 20s   outage: bound on the gateways' convergence once it returned
//	-zk-tls                ZooKeeper requires TLS with a client certificate, and
//	                       every process connects to its secureClientPort (tls.go)
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gracekit/gracekit/examples/internal/drive"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

const (
	pkgProvider = "github.com/gracekit/gracekit/examples/provider"
	pkgGateway  = "github.com/gracekit/gracekit/examples/gateway"
	pkgCached   = "github.com/gracekit/gracekit/examples/cachedgw"

	providerService = "quote"
	gatewayService  = "gateway"
	cachedService   = "cachedgw"
	// The gRPC run's services, apart from the HTTP ones'.
	grpcProviderService = "quote-grpc"
	grpcGatewayService  = "gateway-grpc"
	// The migrate scenario's, apart from both.
	migrateProviderService = "quote-gokit"
	migrateGatewayService  = "gateway-migrate"
	modeMigrate            = "migrate"

	transportHTTP = "http"
	transportGRPC = "grpc"
	// basePathPrefix starts the run's own base path (CONTRACT.md); the
	// driver never deletes a node outside such a path.
	basePathPrefix = "/gracekit-demo-"
	nProviders     = 3
)

type config struct {
	transports  []string // http, grpc: in order, each running every mode
	modes       []string
	workers     int
	minRequests int64
	maxRequests int64
	latency     time.Duration
	preRoll     time.Duration // load before the first restart
	preCrash    time.Duration // load after the rolling restart, before the crash
	postCrash   time.Duration // load after the crash, at least
	postRoll    time.Duration // load after the crash, at least, and until minRequests
	loadLimit   time.Duration // hard bound on a mode's load
	stopLimit   time.Duration // SIGTERM to SIGKILL
	readyLimit  time.Duration // start to /readyz 200
	reqTimeout  time.Duration
	keep        bool
	reusePorts  bool   // restart providers on their old port
	noCrash     bool   // skip the kill -9
	binDir      string // prebuilt provider, gateway and cachedgw, instead of building
	lanes       int    // modes run at once
	svgPath     string // where the timeline chart goes
	zkTLS       bool   // ZooKeeper requires TLS with a client certificate
	ss          ssConfig
	outage      outageConfig
}

func main() { os.Exit(run()) }

var start = time.Now()

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[rollout %5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

func parseFlags() config {
	c := config{preRoll: time.Second, preCrash: time.Second, postCrash: 2 * time.Second, postRoll: 0, loadLimit: 75 * time.Second,
		stopLimit: 20 * time.Second, readyLimit: 30 * time.Second, reqTimeout: 10 * time.Second}
	modes := flag.String("modes", "graceful,naive,migrate,slowstart", "modes to run, in order (migrate, slowstart and outage run over HTTP only; outage is opt-in: add it, as in -modes graceful,naive,migrate,slowstart,outage)")
	transports := flag.String("transport", "http,grpc", "transports to run, in order, each in every mode: http, grpc")
	flag.IntVar(&c.workers, "workers", 21, "concurrent load workers (going round the consumers)")
	flag.Int64Var(&c.minRequests, "requests", 4000, "minimum requests per mode")
	flag.DurationVar(&c.latency, "latency", 50*time.Millisecond, "PROVIDER_LATENCY given to the providers")
	flag.BoolVar(&c.reusePorts, "reuse-ports", false, "restart providers on their old port (default: a new port per restart, like a new pod's new IP)")
	flag.BoolVar(&c.noCrash, "no-crash", false, "skip the kill -9 of a provider after the rolling restart")
	flag.IntVar(&c.lanes, "lanes", 2, "modes run at once, each under a base path of its own (1: one after another)")
	flag.StringVar(&c.binDir, "bindir", "", "use the provider, gateway and cachedgw binaries in this directory instead of building them")
	flag.BoolVar(&c.keep, "keep", false, "keep the temporary directory (binaries, logs) even on success")
	flag.BoolVar(&c.zkTLS, "zk-tls", false, "ZooKeeper requires TLS with a client certificate (ssl.clientAuth=need) from a PKI made for the run, and every process connects to its secureClientPort with GRACEKIT_ZK_TLS_* (no SASL: go-kit's sd/zk has none)")
	flag.StringVar(&c.svgPath, "svg", filepath.Join(os.TempDir(), "gracekit-demo.svg"), "where to write the timeline chart (SVG) of every mode")
	flag.DurationVar(&c.ss.warmup, "ss-warmup", 2*time.Second, "slowstart mode: the providers' -warmup (cold phase)")
	flag.DurationVar(&c.ss.warmupDelay, "ss-warmup-delay", 50*time.Millisecond, "slowstart mode: the providers' -warmup-delay (a cold call's extra delay at first)")
	flag.DurationVar(&c.ss.window, "ss-window", 6*time.Second, "slowstart mode: GRACEKIT_SLOW_START_WINDOW of the gateway with slow start on")
	flag.IntVar(&c.ss.workers, "ss-workers", 12, "slowstart mode: load workers per gateway")
	flag.DurationVar(&c.ss.settle, "ss-restart-window", 4*time.Second, "slowstart mode: each restart's window lasts this long after the new providers are ready, and the next restart waits for its end")
	flag.DurationVar(&c.ss.steady, "ss-steady", 3*time.Second, "slowstart mode: steady load before the first restart and after the last window")
	flag.DurationVar(&c.outage.window, "outage-window", 4*time.Second, "outage mode: GRACEKIT_SLOW_START_WINDOW of its gateways (the late provider's ramp)")
	flag.DurationVar(&c.outage.startWait, "outage-start-wait", time.Second, "outage mode: GRACEKIT_SNAPSHOT_START_WAIT of its gateways and late provider")
	flag.DurationVar(&c.outage.hold, "outage-hold", 2*time.Second, "outage mode: load through the gateways serving their snapshot, once both serve, before ZooKeeper comes back")
	flag.DurationVar(&c.outage.converge, "outage-converge", 20*time.Second, "outage mode: bound on the gateways reading ZooKeeper again and routing to the late provider")
	flag.Parse()
	for m := range strings.SplitSeq(*modes, ",") {
		if m = strings.TrimSpace(m); m != "" {
			c.modes = append(c.modes, m)
		}
	}
	for t := range strings.SplitSeq(*transports, ",") {
		if t = strings.TrimSpace(t); t != "" {
			c.transports = append(c.transports, t)
		}
	}
	c.maxRequests = max(10*c.minRequests, 50000)
	return c
}

func run() (code int) {
	cfg := parseFlags()
	for _, m := range cfg.modes {
		if m != "graceful" && m != "naive" && m != modeMigrate && m != modeSlowStart && m != modeOutage {
			fmt.Fprintf(os.Stderr, "rollout: unknown mode %q (want graceful, naive, migrate, slowstart or outage)\n", m)
			return 2
		}
	}
	if err := cfg.outage.check(); err != nil {
		fmt.Fprintln(os.Stderr, "rollout:", err)
		return 2
	}
	if s := cfg.ss; s.warmup < 0 || s.warmupDelay < 0 || s.window <= 0 || s.workers < 1 || s.settle <= 0 || s.steady <= 0 {
		fmt.Fprintf(os.Stderr, "rollout: invalid slowstart flags -ss-warmup %v -ss-warmup-delay %v -ss-window %v -ss-workers %d -ss-restart-window %v -ss-steady %v (want the durations positive, the warm-ups zero or more, and at least 1 worker)\n",
			s.warmup, s.warmupDelay, s.window, s.workers, s.settle, s.steady)
		return 2
	}
	if cfg.lanes < 1 {
		fmt.Fprintf(os.Stderr, "rollout: invalid -lanes %d (want 1 or more)\n", cfg.lanes)
		return 2
	}
	for _, t := range cfg.transports {
		if t != transportHTTP && t != transportGRPC {
			fmt.Fprintf(os.Stderr, "rollout: unknown transport %q (want http or grpc)\n", t)
			return 2
		}
	}
	if cfg.zkTLS && os.Getenv("GRACEKIT_ZK_SERVERS") != "" {
		fmt.Fprintln(os.Stderr, "rollout: -zk-tls starts a ZooKeeper of its own, with a PKI of its own: unset GRACEKIT_ZK_SERVERS")
		return 2
	}
	if os.Getenv("GRACEKIT_ZK_SERVERS") == "" || slices.Contains(cfg.modes, modeOutage) {
		if _, _, err := zktest.Runtime(); err != nil {
			if os.Getenv("GRACEKIT_ZK_SERVERS") != "" {
				err = fmt.Errorf("%w: %w", errNoOutageZK, err)
			}
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
	d := &driver{cfg: cfg, tmp: tmp, sup: drive.NewSupervisor(), basePath: basePathPrefix + drive.RandomHex(8), runID: drive.RandomHex(4), usedPorts: map[int]bool{}}

	// Ctrl-C or SIGTERM: stop the scenario and kill every child at once; a
	// second signal exits without waiting for anything else.
	stopSignals := drive.OnInterrupt(func(sig os.Signal) {
		logf("%v: stopping every process", sig)
		d.interrupted.Store(true)
		cancel()
		d.sup.KillAll()
	}, func() {
		d.sup.KillAll()
		external := d.closeZK()
		fmt.Fprintf(os.Stderr, "rollout: interrupted again; logs in %s\n", tmp)
		if external {
			fmt.Fprintf(os.Stderr, "rollout: the ZooKeeper paths %s-* may be left behind\n", d.basePath)
		}
		os.Exit(130)
	})

	defer func() {
		// Every exit path: no child, no ZooKeeper left behind.
		stopSignals()
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
		if why := verdict(r); why != "" {
			fmt.Fprintf(os.Stderr, "rollout: mode %s: %s; binaries and logs are in %s\n", modeTag(r.Transport, r.Mode), why, tmp)
			d.keptNoted = true
			code = 1
		}
	}
	for _, r := range results {
		for _, n := range ssNotes(r) {
			fmt.Fprintf(os.Stderr, "rollout: mode %s: note: %s\n", r.Mode, n)
		}
	}
	if path, err := writeChart(cfg.svgPath, results); err != nil {
		fmt.Fprintln(os.Stderr, "rollout: the timeline chart:", err)
		code = 1
	} else {
		fmt.Printf("REPORT svg=%s\n", path)
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
	sup         *drive.Supervisor
	basePath    string // this run's base path: basePathPrefix + random hex
	runID       string // starts every idempotency key of the run
	interrupted atomic.Bool

	portMu    sync.Mutex
	usedPorts map[int]bool

	zkMu      sync.Mutex
	zkCluster *zktest.Cluster
	zkConnect string
	outageZK  *zktest.Cluster // the outage mode's own, which it stops and starts
	bases     []string        // the modes' base paths a child was started under
	bins      map[string]string
	keptNoted bool // the logs directory was already printed

	// -zk-tls (tls.go): the run's PKI, the TLS of the driver's own
	// sessions, and the GRACEKIT_ZK_TLS_* every child gets; nil without.
	pki     *zktest.PKI
	zkTLS   *sd.TLSConfig
	tlsVars map[string]string
}

// closeZK stops the local ZooKeeper, if the driver started one. It
// reports whether the ZooKeeper used is an external one.
func (d *driver) closeZK() (external bool) {
	d.zkMu.Lock()
	defer d.zkMu.Unlock()
	if d.outageZK != nil {
		_ = d.outageZK.Close()
		d.outageZK = nil
	}
	if d.zkCluster != nil {
		_ = d.zkCluster.Close()
		d.zkCluster = nil
		return false
	}
	return d.zkConnect != ""
}

// removeBasePath deletes every mode's base path and everything below it,
// once every child has ended. It only warns on failure.
func (d *driver) removeBasePath() {
	d.zkMu.Lock()
	connect, bases := d.zkConnect, d.bases
	d.bases = nil
	d.zkMu.Unlock()
	if connect == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, base := range bases {
		if err := deleteTree(ctx, connect, d.zkTLS, base); err != nil {
			logf("warning: removing %s from ZooKeeper: %v", base, err)
		}
	}
}

// useBase records that a child is about to be started under base, so that
// removeBasePath deletes it.
func (d *driver) useBase(base string) {
	d.zkMu.Lock()
	defer d.zkMu.Unlock()
	if !slices.Contains(d.bases, base) {
		d.bases = append(d.bases, base)
	}
}

// modeBase is the base path of one mode of the run: modes that run at the
// same time must not see each other's instances.
func (d *driver) modeBase(transport, mode string) string {
	return d.basePath + "-" + strings.ReplaceAll(modeTag(transport, mode), " ", "-")
}

func (d *driver) run(ctx context.Context) ([]*modeResult, error) {
	if err := d.build(ctx); err != nil {
		return nil, err
	}
	if d.cfg.zkTLS {
		if err := d.makePKI(); err != nil {
			return nil, err
		}
	}
	type job struct{ transport, mode string }
	var jobs []job
	for _, tr := range d.cfg.transports {
		for _, mode := range d.cfg.modes {
			if (mode == modeMigrate || mode == modeSlowStart || mode == modeOutage) && tr != transportHTTP {
				continue // go-kit's sd/zk registrations name HTTP instances here; slow start and the outage are shown once
			}
			jobs = append(jobs, job{tr, mode})
		}
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("no mode to run: -modes %s over -transport %s (migrate, slowstart and outage run over http only)",
			strings.Join(d.cfg.modes, ","), strings.Join(d.cfg.transports, ","))
	}
	// The outage mode runs on a ZooKeeper of its own; the shared one is
	// for the others.
	if slices.ContainsFunc(jobs, func(j job) bool { return j.mode != modeOutage }) {
		if err := d.startZK(ctx); err != nil {
			return nil, err
		}
	}
	// The modes run -lanes at a time, each under a base path of its own,
	// the longest (slowstart) first: the demo's load takes a third of a
	// core, so two lanes halve its time without starving a mode.
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(modeWeight(jobs[b].mode), modeWeight(jobs[a].mode))
	})
	results := make([]*modeResult, len(jobs))
	errs := make([]error, len(jobs))
	next := make(chan int, len(order))
	for _, i := range order {
		next <- i
	}
	close(next)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range d.cfg.lanes {
		wg.Go(func() {
			for i := range next {
				if ctx.Err() != nil {
					return
				}
				j := jobs[i]
				switch j.mode {
				case modeSlowStart:
					results[i], errs[i] = d.runSlowStart(ctx, d.modeBase(j.transport, j.mode))
				case modeOutage:
					results[i], errs[i] = d.runOutage(ctx, d.modeBase(j.transport, j.mode))
				default:
					results[i], errs[i] = d.runMode(ctx, j.transport, j.mode, d.modeBase(j.transport, j.mode))
				}
				if errs[i] != nil {
					errs[i] = fmt.Errorf("%s: %w", modeTag(j.transport, j.mode), errs[i])
					cancel() // the run has failed: end the other lane too
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, err
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return results, nil
}

// modeWeight orders the modes for the lanes: the longest first.
func modeWeight(mode string) int {
	switch mode {
	case modeOutage:
		return 2 // it starts a ZooKeeper of its own too
	case modeSlowStart:
		return 1
	}
	return 0
}

// build compiles the provider, the gateway and the cached gateway once,
// into the temp dir.
func (d *driver) build(ctx context.Context) error {
	if d.cfg.binDir != "" {
		d.bins = map[string]string{
			providerService: filepath.Join(d.cfg.binDir, "provider"),
			gatewayService:  filepath.Join(d.cfg.binDir, "gateway"),
			cachedService:   filepath.Join(d.cfg.binDir, "cachedgw"),
		}
		return nil
	}
	bin := filepath.Join(d.tmp, "bin")
	logf("building examples/provider, examples/gateway and examples/cachedgw")
	if err := drive.Build(ctx, bin, pkgProvider, pkgGateway, pkgCached); err != nil {
		return err
	}
	d.bins = map[string]string{
		providerService: filepath.Join(bin, "provider"),
		gatewayService:  filepath.Join(bin, "gateway"),
		cachedService:   filepath.Join(bin, "cachedgw"),
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
	logf("starting a local ZooKeeper (zktest)%s", d.tlsNote())
	c, err := zktest.Start(filepath.Join(d.tmp, "zookeeper"), d.zkOptions()...)
	if err != nil {
		if errors.Is(err, zktest.ErrNotInstalled) {
			return err // its message is the install command
		}
		return fmt.Errorf("start ZooKeeper: %w", err)
	}
	d.zkMu.Lock()
	d.zkCluster, d.zkConnect = c, d.connectString(c)
	d.zkMu.Unlock()
	if ctx.Err() != nil { // interrupted while the JVM started
		d.closeZK()
		return ctx.Err()
	}
	logf("ZooKeeper serves at %s", d.zkConnect)
	return nil
}

// Consumer names, as the table shows them.
const (
	consumerGracekit = "gracekit"
	consumerGoKit    = "go-kit"
	consumerCached   = "cached"
	consumerGRPCGo   = "grpc-go" // plain grpc-go through grpcresolver
)

// modeTag names a mode of a transport in logs: "graceful", "grpc graceful".
func modeTag(transport, mode string) string {
	if transport == transportGRPC {
		return transportGRPC + " " + mode
	}
	return mode
}

// instance is one provider or consumer slot: its id is stable across
// restarts; a provider gets a new port at each restart unless -reuse-ports.
type instance struct {
	service string
	id      string
	name    string // the consumer's name in the table; "" for a provider
	bin     string // key of driver.bins
	args    []string
	watches bool // a consumer that watches ZooKeeper: it must route to a restarted provider
	grpc    bool // a gRPC provider: GRACEKIT_GRPC_PORT, ready by its health service
	port    int
	vars    map[string]string
	runs    int
	proc    *drive.Proc
}

func (in *instance) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(in.port)) }

func (in *instance) url(path string) string { return "http://" + in.addr() + path }

// procName names the instance's current process: "quote-1.run2".
func (in *instance) procName() string { return fmt.Sprintf("%s.run%d", in.id, in.runs) }

// startInstance starts the instance's next run. A provider's ledger is
// <dir>/ledger/<id>.run<n>.keys.
func (d *driver) startInstance(dir string, in *instance) error {
	in.runs++
	vars := maps.Clone(in.vars)
	vars["GRACEKIT_PORT"] = strconv.Itoa(in.port)
	if in.grpc {
		vars["GRACEKIT_GRPC_PORT"] = strconv.Itoa(in.port)
	}
	if in.name == "" { // a provider
		vars["PROVIDER_LEDGER"] = filepath.Join(dir, "ledger", in.procName()+".keys")
	}
	logPath := filepath.Join(dir, in.procName()+".log")
	p, err := d.sup.Start(in.id, d.bins[in.bin], in.args, drive.ChildEnv(os.Environ(), vars), logPath)
	if err != nil {
		return err
	}
	in.proc = p
	return nil
}

// newPort returns a free port not used before in this run, so that a
// restarted provider listens at a new address, as a new pod gets a new IP.
func (d *driver) newPort() (int, error) {
	d.portMu.Lock()
	defer d.portMu.Unlock()
	for range 20 {
		ps, err := zktest.FreePorts(1)
		if err != nil {
			return 0, err
		}
		if !d.usedPorts[ps[0]] {
			d.usedPorts[ps[0]] = true
			return ps[0], nil
		}
	}
	return 0, errors.New("no new free port after 20 tries")
}

// slots returns the consumers and providers of a mode of a transport.
// HTTP: gracekit's gateway, go-kit as documented, and a Spring-style
// cached gateway, in front of HTTP providers. gRPC: the gateway over
// gracekit's consumer with endpoint/grpcfactory, over go-kit's sd/zk and
// transport/grpc, and over a plain grpc-go ClientConn through
// grpcresolver, in front of gRPC-only providers.
func slots(transport, mode string) (consumers, providers []*instance) {
	provService, gwService := providerService, gatewayService
	var gwArgs, provArgs []string
	if mode == modeMigrate {
		// 3 providers registered by go-kit's own sd/zk Registrar, replaced
		// one by one with gracekit's (GoKitRegistration), under load from a
		// stock go-kit consumer (host:port instance strings) and gracekit's
		// (sd.MixedCodec): GATEWAY_GOKIT_NODES.
		consumers = []*instance{
			{service: migrateGatewayService, id: migrateGatewayService + "-gracekit", name: consumerGracekit, bin: gatewayService, args: []string{"-mode", "graceful"}, watches: true},
			{service: migrateGatewayService, id: migrateGatewayService + "-gokit", name: consumerGoKit, bin: gatewayService, args: []string{"-mode", "naive"}, watches: true},
		}
		for i := 1; i <= nProviders; i++ {
			providers = append(providers, &instance{service: migrateProviderService, id: fmt.Sprintf("%s-%d", migrateProviderService, i),
				bin: providerService, args: []string{"-mode", "gokit"}})
		}
		return consumers, providers
	}
	if transport == transportGRPC {
		provService, gwService = grpcProviderService, grpcGatewayService
		gwArgs, provArgs = []string{"-transport", transportGRPC}, []string{"-transport", transportGRPC}
		consumers = []*instance{
			{service: gwService, id: gwService + "-gracekit", name: consumerGracekit, bin: gatewayService, args: append([]string{"-mode", "graceful"}, gwArgs...), watches: true},
			{service: gwService, id: gwService + "-gokit", name: consumerGoKit, bin: gatewayService, args: append([]string{"-mode", "naive"}, gwArgs...), watches: true},
			{service: gwService, id: gwService + "-grpcgo", name: consumerGRPCGo, bin: gatewayService, args: append([]string{"-mode", "resolver"}, gwArgs...), watches: true},
		}
	} else {
		consumers = []*instance{
			{service: gwService, id: gwService + "-gracekit", name: consumerGracekit, bin: gatewayService, args: []string{"-mode", "graceful"}, watches: true},
			{service: gwService, id: gwService + "-gokit", name: consumerGoKit, bin: gatewayService, args: []string{"-mode", "naive"}, watches: true},
			{service: cachedService, id: cachedService + "-1", name: consumerCached, bin: cachedService},
		}
	}
	for i := 1; i <= nProviders; i++ {
		providers = append(providers, &instance{service: provService, id: fmt.Sprintf("%s-%d", provService, i), bin: providerService,
			args: append([]string{"-mode", mode}, provArgs...), grpc: transport == transportGRPC})
	}
	return consumers, providers
}

func (d *driver) runMode(ctx context.Context, transport, mode, base string) (res *modeResult, err error) {
	cfg := d.cfg
	tag := modeTag(transport, mode)
	dir := filepath.Join(d.tmp, mode)
	keyPrefix := fmt.Sprintf("%s-%s-", d.runID, mode)
	if transport == transportGRPC {
		dir = filepath.Join(d.tmp, transportGRPC+"-"+mode)
		keyPrefix = fmt.Sprintf("%s-%s-%s-", d.runID, transportGRPC, mode)
	}
	if err := os.MkdirAll(filepath.Join(dir, "ledger"), 0o755); err != nil {
		return nil, err
	}
	logf("=== mode %s (logs in %s)", tag, dir)

	// The three consumers, side by side under the same load.
	consumers, providers := slots(transport, mode)
	var stale []string
	for _, in := range slices.Concat(consumers, providers) {
		stale = append(stale, base+"/"+in.service+"/"+in.id)
	}
	// A previous mode may have left nodes of killed processes (only in this
	// run's own base path).
	if err := deleteNodes(ctx, d.zkConnect, d.zkTLS, base, stale...); err != nil {
		logf("warning: cleaning old instance nodes: %v", err)
	}

	secret := drive.RandomHex(32)
	for _, in := range slices.Concat(consumers, providers) {
		if in.port, err = d.newPort(); err != nil {
			return nil, err
		}
	}
	for _, in := range slices.Concat(consumers, providers) {
		in.vars = map[string]string{
			"GRACEKIT_ZK_SERVERS":   d.zkConnect,
			"GRACEKIT_BASE_PATH":    base,
			"GRACEKIT_SERVICE":      in.service,
			"GRACEKIT_INSTANCE_ID":  in.id,
			"GRACEKIT_ADDRESS":      "127.0.0.1",
			"GRACEKIT_FLUSH_SECRET": secret,
		}
		maps.Copy(in.vars, d.tlsVars)
		if in.name == "" { // a provider
			in.vars["GRACEKIT_FLUSH_GATEWAYS"] = consumers[0].service
			in.vars["PROVIDER_LATENCY"] = cfg.latency.String()
			if mode == "graceful" && transport == transportHTTP {
				// The Spring compatibility mode flushes the cached gateway.
				in.vars["GRACEKIT_SPRING_FLUSH_TARGETS"] = consumers[2].url("/flushCache")
			}
		} else {
			in.vars["GATEWAY_UPSTREAM"] = providers[0].service
			in.vars["GATEWAY_LOOPBACK_ONLY"] = "1" // only ever the demo's own providers
			if mode == modeMigrate {
				in.vars["GATEWAY_GOKIT_NODES"] = "1"
			}
		}
	}

	// Whatever happens, end this mode's processes: providers first (a
	// graceful provider flushes the gateways as it stops), then consumers.
	defer func() {
		drive.StopAll(procsOf(providers), 10*time.Second)
		drive.StopAll(procsOf(consumers), 10*time.Second)
	}()

	d.useBase(base)
	// Providers first, registered before any consumer starts: the cached
	// gateway reads its list once, at start, and one that read two of
	// three providers held the run until its TTL (35 s).
	for _, in := range providers {
		if err := d.startInstance(dir, in); err != nil {
			return nil, err
		}
	}
	for _, in := range providers {
		if err := waitReady(ctx, in, cfg.readyLimit); err != nil {
			return nil, err
		}
	}
	for _, in := range consumers {
		if err := d.startInstance(dir, in); err != nil {
			return nil, err
		}
	}
	logf("[%s] started %d providers and %d consumers (%s); waiting for them to be ready", tag, nProviders, len(consumers), strings.Join(namesOf(consumers), ", "))
	for _, in := range consumers {
		if err := waitReady(ctx, in, cfg.readyLimit); err != nil {
			return nil, err
		}
	}
	urls := make([]string, len(consumers))
	names := make([]string, len(consumers))
	var watching []int
	for i, c := range consumers {
		urls[i], names[i] = c.url(""), c.name
		if c.watches {
			watching = append(watching, i)
		}
		if err := waitRoutes(ctx, c, nProviders, cfg.readyLimit); err != nil {
			return nil, err
		}
	}
	logf("[%s] all ready; load: %d workers, ≥%d requests, 20%% POST /api/orders with an Idempotency-Key", tag, cfg.workers, cfg.minRequests)

	ld := newLoad(urls, keyPrefix, cfg.workers, cfg.maxRequests, cfg.reqTimeout, time.Now().Add(cfg.loadLimit))
	ld.run(ctx)
	defer ld.stop()
	if err := drive.SleepCtx(ctx, cfg.preRoll); err != nil {
		return nil, err
	}
	loadStart := ld.started

	res = &modeResult{Mode: mode, Transport: transport, Workers: cfg.workers, Latency: cfg.latency}
	var marks []mark
	type window struct{ from, to time.Time }
	windows := make([]window, len(providers))
	for i, in := range providers {
		// Spread the restarts over the run: the i-th waits for its share of
		// the requests (it never waits when stops are slower than that).
		due := int64(i+1) * cfg.minRequests / int64(len(providers)+2)
		for ld.completed.Load() < due && time.Since(loadStart) < cfg.loadLimit/2 {
			if err := drive.SleepCtx(ctx, 20*time.Millisecond); err != nil {
				return nil, err
			}
		}
		if ld.finished() {
			// A restart now would happen with no load to show its effect.
			res.Invalid = fmt.Sprintf("the load reached its bound (%d requests, %.1fs) before %s was stopped",
				ld.completed.Load(), time.Since(loadStart).Seconds(), in.id)
			logf("[%s] %s: no more restarts", tag, res.Invalid)
			break
		}
		old := in.proc
		sigAt := time.Now()
		marks = append(marks, mark{At: sigAt.Sub(loadStart), Kind: markSIGTERM, ID: in.id})
		logf("[%s] SIGTERM %s (%d requests so far, %d failed)", tag, in.id, ld.completed.Load(), ld.fails.Load())
		killed := old.Stop(syscall.SIGTERM, cfg.stopLimit)
		st := stopResult{ID: in.id, Wall: old.ExitedAt().Sub(sigAt), Killed: killed, Exit: old.ExitString()}
		rep, rerr := stopReportFile(old.LogPath())
		st.Report = rep
		switch {
		case rerr != nil:
			st.ReportErr = rerr.Error()
		case rep == nil:
			st.ReportErr = "no STOPREPORT line on stdout; stop time is the wall time (see " + old.LogPath() + ")"
		}
		if killed {
			logf("[%s] %s did not exit within %v: killed", tag, in.id, cfg.stopLimit)
			if err := deleteNodes(ctx, d.zkConnect, d.zkTLS, base, base+"/"+in.service+"/"+in.id); err != nil {
				logf("warning: %v", err)
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !cfg.reusePorts {
			if in.port, err = d.newPort(); err != nil {
				return nil, err
			}
		}
		if mode == modeMigrate {
			// Its replacement: gracekit, with a twin for go-kit's consumers.
			in.args = []string{"-mode", "graceful"}
			in.vars["PROVIDER_GOKIT_TWIN"] = base
		}
		logf("[%s] %s exited (%s) after %.0fms; starting it again at %s", tag, in.id, st.Exit, ms(st.Wall), in.addr())
		if err := d.startInstance(dir, in); err != nil {
			return nil, err
		}
		if err := waitReady(ctx, in, cfg.readyLimit); err != nil {
			return nil, err
		}
		readyAt := time.Now()
		st.BackReady = readyAt.Sub(sigAt)
		marks = append(marks, mark{At: readyAt.Sub(loadStart), Kind: markRestart, ID: in.id})
		// Like a rollout with maxUnavailable=1: go on once the consumers
		// that watch ZooKeeper route to the new process (bounded; the load
		// tells us). The cached gateway learns of it only when it reads
		// its list again.
		back := readyAt
		for deadline := readyAt.Add(10 * time.Second); !ld.seenSince(in.id, readyAt, watching); {
			if ld.ended() {
				break // no request will be sent any more; checked below
			}
			if time.Now().After(deadline) {
				logf("[%s] warning: the gateways did not route to %s within 10s of /readyz", tag, in.id)
				break
			}
			if err := drive.SleepCtx(ctx, 20*time.Millisecond); err != nil {
				return nil, err
			}
			back = time.Now()
		}
		windows[i] = window{sigAt, back}
		res.Stops = append(res.Stops, st)
		if !ld.seenSince(in.id, readyAt, watching) && ld.ended() {
			// The restart was not seen through: the load stopped first.
			res.Invalid = fmt.Sprintf("the load reached its bound (%d requests, %.1fs) before the gateways routed to %s again",
				ld.completed.Load(), time.Since(loadStart).Seconds(), in.id)
			logf("[%s] %s", tag, res.Invalid)
			break
		}
		logf("[%s] %s ready again after %.0fms, routed after %.0fms", tag, in.id, ms(st.BackReady), ms(back.Sub(sigAt)))
	}

	if mode == modeMigrate && res.Invalid == "" && !ld.finished() {
		// Every provider migrated: an operator drains one.
		if res.Drain, err = d.drainUnderLoad(ctx, base, tag, ld, providers[0], len(consumers), watching); err != nil {
			return nil, err
		}
	}

	// One crash: kill -9 a provider under load. Nothing can drain it.
	var crash *crashInfo
	if res.Invalid == "" && !cfg.noCrash && mode != modeMigrate && !ld.finished() {
		if err := drive.SleepCtx(ctx, cfg.preCrash); err != nil {
			return nil, err
		}
		victim := providers[1]
		crash = &crashInfo{ID: victim.id, Proc: victim.procName(), Addr: victim.addr(), At: time.Now()}
		marks = append(marks, mark{At: crash.At.Sub(loadStart), Kind: markKill, ID: victim.id})
		logf("[%s] kill -9 %s (%s) (%d requests so far, %d failed)", tag, victim.id, crash.Addr, ld.completed.Load(), ld.fails.Load())
		victim.proc.Stop(syscall.SIGKILL, 5*time.Second)
		res.CrashExit = victim.proc.ExitString()
		if err := drive.SleepCtx(ctx, cfg.postCrash); err != nil {
			return nil, err
		}
	}

	post := time.Now()
	for res.Invalid == "" && (time.Since(post) < cfg.postRoll || ld.completed.Load() < cfg.minRequests) {
		if ld.finished() {
			logf("[%s] warning: the load stopped at its bound with %d requests", tag, ld.completed.Load())
			break
		}
		if err := drive.SleepCtx(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
	ld.stop()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	led, err := readLedgers(filepath.Join(dir, "ledger"))
	if err != nil {
		return nil, fmt.Errorf("read the providers' ledgers: %w", err)
	}
	samples := ld.all()
	res.summarize(samples, ld.stoppedAt.Sub(ld.started), names, led, crash)
	res.Timeline = newTimeline(tag, names, loadStart, samples, marks, crash)
	res.Timeline.FailedN, res.Timeline.CrashFailedN = res.Failed(), res.CrashFailed()
	if res.Drain != nil {
		res.Drain.count(samples)
		res.DrainNames = names
	}
	for i, c := range consumers {
		res.Consumers[i].Retries = scrapeRetries(c)
	}
	res.Total.Retries = nil
	for _, c := range res.Consumers {
		for k, v := range c.Retries {
			if res.Total.Retries == nil {
				res.Total.Retries = map[string]float64{}
			}
			res.Total.Retries[k] += v
		}
	}
	res.Metrics = scrapeGracekit(consumers[0])
	for i := range res.Stops {
		res.Stops[i].FailedDuring = failedBetween(samples, windows[i].from, windows[i].to)
	}
	logf("[%s] done: %d requests, %d failed, %d duplicated, %d crash-failed", tag, res.Requests(), res.Failed(), res.Duplicated(), res.CrashFailed())
	return res, nil
}

// waitReady polls the instance's /readyz until it answers 200, or a gRPC
// provider's health service until it is SERVING.
func waitReady(ctx context.Context, in *instance, limit time.Duration) error {
	if in.grpc {
		return drive.WaitGRPCReady(ctx, in.id, in.proc, in.addr(), limit)
	}
	return drive.WaitReady(ctx, in.id, in.proc, in.url("/readyz"), limit)
}

func namesOf(cs []*instance) []string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.name
	}
	return names
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
		if answered, id, why := drive.Probe(client, gw.url("/api/quote?symbol=ABC")); !answered {
			last = why
		} else {
			ok++
			if id != "" {
				seen[id] = true
			}
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
				gw.id, limit, last, gw.proc.LogPath(), drive.Tail(gw.proc.LogPath(), 15))
		}
		if err := drive.SleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// retryMetric is the retry counter of each consumer's /metrics.
var retryMetric = map[string]string{
	consumerGracekit: "gateway_retries_total",
	consumerGoKit:    "gateway_retries_total",
	consumerCached:   "cachedgw_retries_total",
	consumerGRPCGo:   "gateway_retries_total",
	consumerSSOn:     "gateway_retries_total",
	consumerSSOff:    "gateway_retries_total",
}

// scrapeRetries returns the retries a consumer counts in its /metrics, by
// route; nil when it does not expose them.
func scrapeRetries(c *instance) map[string]float64 {
	body, err := scrape(c)
	if err != nil {
		return nil
	}
	return parseCounter(strings.NewReader(body), retryMetric[c.name], "route")
}

// scrapeGracekit returns lines about the gracekit gateway's own metrics:
// retries, failures and ejections by reason, flush results.
func scrapeGracekit(c *instance) []string {
	body, err := scrape(c)
	if err != nil {
		return []string{"gracekit metrics: " + err.Error()}
	}
	var parts []string
	for _, m := range []struct{ name, label, title string }{
		{"gracekit_endpoint_retries_total", "reason", "retries"},
		{"gracekit_endpoint_failures_total", "reason", "failures"},
		{"gracekit_endpoint_ejections_total", "reason", "ejections"},
		{"gracekit_flush_results_total", "result", "flushes"},
	} {
		if v := parseCounter(strings.NewReader(body), m.name, m.label); v != nil {
			parts = append(parts, m.title+" "+formatCounts(v))
		} else {
			parts = append(parts, m.title+" none")
		}
	}
	return []string{"gracekit gateway /metrics by reason: " + strings.Join(parts, "; ")}
}

func scrape(c *instance) (string, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Get(c.url("/metrics"))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return string(b), err
}

// procsOf is the processes of ins, for drive.StopAll.
func procsOf(ins []*instance) []*drive.Proc {
	ps := make([]*drive.Proc, 0, len(ins))
	for _, in := range ins {
		ps = append(ps, in.proc)
	}
	return ps
}
