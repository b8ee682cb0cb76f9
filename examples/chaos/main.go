// Command chaos is the driver of `make chaos`: the fault matrix under load.
//
// It builds the example provider and gateway, starts a 3-member ZooKeeper
// ensemble (zktest), 3 providers and 2 gracekit gateways (graceful mode),
// sends steady load through the gateways (250 requests/s by default, 20%
// POST /api/orders, each with its own Idempotency-Key) and runs these
// faults one after another, each with the load running through it:
//
//	leader     the ensemble's leader is killed (SIGKILL) and restarted
//	ensemble   the whole ensemble is down for 30 s and comes back with its data
//	session    one provider's ZooKeeper session is expired
//	partition  one provider is cut off from ZooKeeper for 20 s
//	kill       one provider is killed with SIGKILL, then started again
//	rolling    every provider is restarted in turn while one member is down
//
// Each provider reaches ZooKeeper through a small TCP proxy inside the
// driver (one listener per member), which records its session (to expire
// it) and can cut it off (the partition). The gateways connect straight
// to the ensemble. A restarted provider listens on a new port.
//
// Beside that HTTP group, and through the same faults at the same time,
// runs a gRPC group (-transport): 3 gRPC-only providers (examples/provider
// -transport grpc, each behind its own proxy, services quote-grpc) and 2
// gateways over them (examples/gateway -transport grpc): gracekit's
// consumer with endpoint/grpcfactory, and a plain grpc-go ClientConn
// through grpcresolver with round_robin and health checking, with a load
// of its own at the same rate. Each fault hits both groups: the session,
// partition and kill faults hit the same provider slot of each; the
// rolling restart restarts the groups' i-th providers one after the other.
//
// It prints, for each fault, and for each group (the gRPC group's lines
// name their transport; the HTTP group's name none)
//
//	CHAOS fault=<name> requests=<n> failed=<n> duplicated=<n> recovered_ms=<x>
//	CHAOS transport=grpc fault=<name> requests=<n> failed=<n> duplicated=<n> recovered_ms=<x>
//
// then a table per group, and last
//
//	RESULT mode=chaos requests=<n> failed=<n> duplicated=<n> crash_failed=<n>
//	RESULT mode=chaos transport=grpc requests=<n> failed=<n> duplicated=<n> crash_failed=<n>
//
// A fault's requests are those sent from its start (a pre-roll of steady
// load) to the next fault's. recovered_ms runs from the end of the fault
// until both gateways have answered with every live provider again (the
// answers name the instance), for a request sent after the end, or after
// the provider registered again when the fault made it (session,
// partition); -1 when they never did. crash_failed counts the POSTs in
// flight on the killed provider when it was killed, or sent between the
// SIGKILL and its exit (the gateway must not re-send them); they are the
// only failures allowed. Through the grpc-go
// gateway, which retries nothing, every request that failed at the killed
// provider's address once it was killed is the crash's, GET or POST (as
// in make demo). The session fault expires the session that owns the
// provider's node (its ephemeralOwner): a provider may hold another, for
// its watches. Duplicates are the
// orders the providers executed more than once, from their ledgers
// (PROVIDER_LEDGER, examples/CONTRACT.md).
//
// It exits 1 on any other failed request, any duplicate, any order
// answered OK that no provider executed, any provider node deleted and
// re-created (czxid) across the leader kill, any fault that did not
// recover, or a load below 200 requests/s. It leaves nothing
// behind: children run in their own process groups with Pdeathsig, and
// every exit path, Ctrl-C included, kills them and the ensemble; the
// temporary directory (binaries, logs, ZooKeeper data) is removed unless
// the run failed or -keep is given.
//
// With -seeds n (make chaos CHAOS_SEEDS=n) or -seed s (CHAOS_SEED=s) it
// runs the robustness mode instead (robust.go): per seed, a fresh ensemble
// and both groups (their gateways behind proxies too, sessions of 4 s), a
// schedule drawn from the seed (schedule.go: rounds of 1 to 3 overlapping
// faults: consumer connections blackholed or reset shorter and longer than
// the session timeout, leader kill, member restart, whole-ensemble restart,
// provider or consumer session expiry, SIGTERM, kill -9, a failed health
// check, an operator drain, status flips, bursts of registrations), while
// a truth recorder and in-process consumers (sd.Instancer, sd.Catalog,
// grpcresolver) record (record.go); examples/internal/history checks the
// history and the load. It prints a line per seed, then the total:
//
//	ROBUST seed=<s> faults=<n> checks=<n> violations=<n>
//	RESULT mode=robustness seeds=<n> violations=<n> requests=<n> failed=<n> duplicated=<n> restore_failed=<n>
//
// A failing seed's directory (history.json, report.txt, logs) is kept.
//
// Flags:
//
//	-faults leader,ensemble,session,partition,kill,rolling  faults to run, in order
//	-transport http,grpc  groups to run side by side
//	-rate 250         requests per second, per group
//	-latency 50ms     PROVIDER_LATENCY
//	-bindir DIR       use prebuilt provider and gateway binaries
//	-keep             keep the temporary directory
//	-seeds n, -seed s robustness mode: n random seeds, or seed s
//	-rounds 5         robustness mode: rounds per schedule
//	-broken           robustness mode: add a consumer that ignores deletions (the run must fail)
//	-zk-tls           the ensemble requires TLS with a client certificate; every
//	                  connection to it is TLS, the proxies terminate it (tls.go)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gracekit/gracekit/examples/internal/drive"
	"github.com/gracekit/gracekit/zktest"
)

const (
	pkgProvider = "github.com/gracekit/gracekit/examples/provider"
	pkgGateway  = "github.com/gracekit/gracekit/examples/gateway"
	// pkgCLI is the gracekit CLI, which the min-up fault's operators run
	// (robustness mode; cliName is its binary and d.bins key).
	pkgCLI  = "github.com/gracekit/gracekit/cmd/gracekit"
	cliName = "gracekit"

	providerService = "quote"
	gatewayService  = "gateway"
	// The gRPC group's services, apart from the HTTP group's.
	grpcProviderService = "quote-grpc"
	grpcGatewayService  = "gateway-grpc"

	transportHTTP  = "http"
	transportGRPC  = "grpc"
	basePathPrefix = "/gracekit-chaos-"
	nProviders     = 3
	nGateways      = 2
	minRate        = 200 // requests per second the load must average
)

var allFaults = []string{"leader", "ensemble", "session", "partition", "kill", "rolling"}

type config struct {
	transports   []string
	faults       []string
	rate         int
	workers      int
	latency      time.Duration
	preRoll      time.Duration // steady load before each fault
	settle       time.Duration // load after the last fault
	leaderDown   time.Duration
	ensembleDown time.Duration
	partition    time.Duration
	recoverLimit time.Duration
	readyLimit   time.Duration
	stopLimit    time.Duration
	reqTimeout   time.Duration
	binDir       string
	keep         bool
	zkTLS        bool // the ensemble requires TLS with a client certificate (tls.go)

	// Robustness mode (robust.go): seeded random fault schedules.
	seeds  int   // -seeds n: n schedules of random seeds
	seed   int64 // -seed s: the schedule of seed s
	seeded bool  // -seed was given
	rounds int
	broken bool // add a consumer that ignores deletions: the run must fail

	noFailpoints bool     // -failpoints=false: build without internal/failpoint's points
	bias         string   // -bias m: draw the schedule to exercise mutant m (mutants.go)
	mutants      bool     // -mutants: the mutation mode (mutants.go)
	mutantList   []string // -mutant a,b: only these
}

var begin = time.Now()

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[chaos %6.1fs] %s\n", time.Since(begin).Seconds(), fmt.Sprintf(format, args...))
}

func parseFlags(args []string) (config, error) {
	c := config{workers: 64, preRoll: 2 * time.Second, settle: 2 * time.Second, leaderDown: 3 * time.Second,
		recoverLimit: 30 * time.Second, readyLimit: 30 * time.Second, stopLimit: 20 * time.Second, reqTimeout: 10 * time.Second}
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	faults := fs.String("faults", strings.Join(allFaults, ","), "faults to run, in order")
	transports := fs.String("transport", "http,grpc", "groups to run side by side through the faults: http, grpc")
	fs.IntVar(&c.rate, "rate", 250, "requests per second")
	fs.DurationVar(&c.latency, "latency", 50*time.Millisecond, "PROVIDER_LATENCY given to the providers")
	fs.DurationVar(&c.ensembleDown, "ensemble-down", 30*time.Second, "how long the whole ensemble stays down")
	fs.DurationVar(&c.partition, "partition", 20*time.Second, "how long one provider is cut off from ZooKeeper")
	fs.StringVar(&c.binDir, "bindir", "", "use the provider, gateway and gracekit (CLI) binaries in this directory instead of building them")
	fs.BoolVar(&c.zkTLS, "zk-tls", false, "the ensemble requires TLS with a client certificate, and every connection to it is TLS (the proxies terminate it, so every fault applies)")
	fs.BoolVar(&c.keep, "keep", false, "keep the temporary directory (binaries, logs, ZooKeeper data) even on success")
	fs.IntVar(&c.seeds, "seeds", 0, "robustness mode: run this many seeded random fault schedules (make chaos CHAOS_SEEDS=n)")
	seed := fs.String("seed", "", "robustness mode: replay the schedule of this seed (make chaos CHAOS_SEED=s)")
	fs.IntVar(&c.rounds, "rounds", 5, "robustness mode: rounds of overlapping faults per schedule")
	fs.BoolVar(&c.broken, "broken", false, "robustness mode: add a consumer that ignores deletions; its history must fail the checks")
	failpoints := fs.Bool("failpoints", true, "robustness mode: build with the library's failpoints and arm them at random from the seed")
	fs.StringVar(&c.bias, "bias", "", "robustness mode: draw the schedule to exercise this planted bug ("+strings.Join(mutantNames(), ", ")+")")
	fs.BoolVar(&c.mutants, "mutants", false, "mutation mode: build with each planted bug in turn; each must be caught (make chaos CHAOS_MUTANTS=1)")
	mutantList := fs.String("mutant", "", "mutation mode: only these planted bugs, comma-separated")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.noFailpoints = !*failpoints
	for name := range strings.SplitSeq(*mutantList, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if _, ok := mutantNamed(name); !ok {
			return c, fmt.Errorf("unknown mutant %q (want some of %s)", name, strings.Join(mutantNames(), ","))
		}
		c.mutantList = append(c.mutantList, name)
	}
	if _, ok := mutantNamed(c.bias); c.bias != "" && !ok {
		return c, fmt.Errorf("unknown -bias %q (want one of %s)", c.bias, strings.Join(mutantNames(), ","))
	}
	if *seed != "" {
		v, err := strconv.ParseInt(*seed, 10, 64)
		if err != nil {
			return c, fmt.Errorf("invalid -seed %q (an integer)", *seed)
		}
		c.seed, c.seeded = v, true
	}
	if c.seeds < 0 || c.seeds > 1000 || c.rounds < 1 || c.rounds > 100 {
		return c, fmt.Errorf("invalid -seeds %d or -rounds %d (allowed 0 to 1000, 1 to 100)", c.seeds, c.rounds)
	}
	var err error
	if c.faults, err = parseFaults(*faults); err != nil {
		return c, err
	}
	if c.transports, err = parseTransports(*transports); err != nil {
		return c, err
	}
	if c.rate < 1 || c.rate > 5000 {
		return c, fmt.Errorf("invalid -rate %d (allowed 1 to 5000)", c.rate)
	}
	return c, nil
}

// parseFaults reads a comma-separated list of fault names.
func parseFaults(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !slices.Contains(allFaults, f) {
			return nil, fmt.Errorf("unknown fault %q (want some of %s)", f, strings.Join(allFaults, ","))
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, errors.New("no fault to run")
	}
	return out, nil
}

// parseTransports reads a comma-separated list of transports.
func parseTransports(s string) ([]string, error) {
	var out []string
	for t := range strings.SplitSeq(s, ",") {
		t = strings.TrimSpace(t)
		switch {
		case t == "":
			continue
		case t != transportHTTP && t != transportGRPC:
			return nil, fmt.Errorf("unknown transport %q (want http, grpc or both)", t)
		case slices.Contains(out, t):
			return nil, fmt.Errorf("transport %q given twice", t)
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, errors.New("no transport to run")
	}
	return out, nil
}

func main() { os.Exit(run()) }

func run() (code int) {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	if _, _, err := zktest.Runtime(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err) // says how to install it
		return 1
	}
	if cfg.mutants {
		return runMutants(cfg)
	}
	if cfg.seeds > 0 || cfg.seeded {
		return runRobust(cfg)
	}
	tmp, err := os.MkdirTemp("", "gracekit-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := &driver{cfg: cfg, tmp: tmp, sup: drive.NewSupervisor(), basePath: basePathPrefix + drive.RandomHex(8), runID: drive.RandomHex(6)}

	// Ctrl-C or SIGTERM: stop, killing every child and the ensemble; a
	// second signal exits at once.
	stopSignals := drive.OnInterrupt(func(sig os.Signal) {
		logf("%v: stopping every process", sig)
		d.interrupted.Store(true)
		cancel()
		d.sup.KillAll()
	}, func() {
		d.sup.KillAll()
		d.closeZK()
		fmt.Fprintf(os.Stderr, "chaos: interrupted again; logs in %s\n", tmp)
		os.Exit(130)
	})
	defer func() {
		stopSignals()
		d.shutdown()
		if d.interrupted.Load() {
			code = 130
		}
		if code != 0 || cfg.keep {
			fmt.Fprintf(os.Stderr, "chaos: binaries, logs and ZooKeeper data are in %s\n", tmp)
		} else {
			_ = os.RemoveAll(tmp)
		}
	}()

	groups, err := d.run(ctx)
	if err != nil {
		if d.interrupted.Load() {
			return 130
		}
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	for _, g := range groups {
		for _, r := range g.results {
			fmt.Println(chaosLine(r))
		}
	}
	var probs []string
	for _, g := range groups {
		if g.transport == transportGRPC {
			fmt.Printf("\n=== transport grpc (gateways: %s)", strings.Join(g.gatewayNames, ", "))
		} else if len(groups) > 1 {
			fmt.Printf("\n=== transport http (gateways: %s)", strings.Join(g.gatewayNames, ", "))
		}
		writeTable(os.Stdout, g.results, g.ledgerNote)
		for _, p := range problems(g.results, minRate) {
			if g.transport == transportGRPC {
				p = "grpc: " + p
			}
			probs = append(probs, p)
		}
	}
	for _, p := range probs {
		fmt.Fprintln(os.Stderr, "chaos: FAIL:", p)
	}
	for _, g := range groups {
		fmt.Println(resultLine(g.results))
	}
	if len(probs) > 0 {
		return 1
	}
	return 0
}

type driver struct {
	cfg         config
	tmp         string
	sup         *drive.Supervisor
	basePath    string
	runID       string // prefix of this run's idempotency keys
	secret      string
	interrupted atomic.Bool

	zkMu    sync.Mutex
	cluster *zktest.Cluster
	reader  *zkReader
	rob     *robustState // robustness mode; nil for the fixed matrix
	sec     *zkSecurity  // -zk-tls (tls.go); nil for plaintext

	bins   map[string]string
	groups []*group
}

// group is one transport's providers and gateways with their load: HTTP
// providers behind two gracekit gateways, or gRPC providers behind a
// gracekit gateway (endpoint/grpcfactory) and a plain grpc-go one
// (grpcresolver). The groups run side by side through the same faults.
type group struct {
	transport string
	providers []*instance
	gateways  []*instance
	names     []string // the gateways' names in the report
	ledgers   []string
	load      *load
}

// tag prefixes a message about g: "" for HTTP, "grpc: " for gRPC.
func (g *group) tag() string {
	if g.transport == transportGRPC {
		return "grpc: "
	}
	return ""
}

// instances are every group's providers, then every group's gateways.
func (d *driver) instances() []*instance {
	var ps, gs []*instance
	for _, g := range d.groups {
		ps = append(ps, g.providers...)
		gs = append(gs, g.gateways...)
	}
	return append(ps, gs...)
}

func (d *driver) allProviders() []*instance {
	var ps []*instance
	for _, g := range d.groups {
		ps = append(ps, g.providers...)
	}
	return ps
}

func (d *driver) allGateways() []*instance {
	var gs []*instance
	for _, g := range d.groups {
		gs = append(gs, g.gateways...)
	}
	return gs
}

// groupResult is what one group's load showed through the faults.
type groupResult struct {
	transport    string
	gatewayNames []string
	results      []faultResult
	ledgerNote   string
}

// instance is one provider or gateway slot: a stable id; a provider gets a
// new port at every start.
type instance struct {
	service string
	id      string
	args    []string // after -mode graceful
	grpc    bool     // a gRPC provider: GRACEKIT_GRPC_PORT, ready by its health service
	port    int
	vars    map[string]string
	runs    int
	proc    *drive.Proc
	proxy   *zkProxy // providers only
	gwProxy *zkProxy // a gateway's, in robustness mode
}

func (in *instance) url(path string) string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(in.port)) + path
}

func (in *instance) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(in.port)) }

// shutdown ends everything the driver started, on every exit path:
// providers first (a graceful provider flushes the gateways), then
// gateways, the proxies and the ensemble.
func (d *driver) shutdown() {
	for _, g := range d.groups {
		if g.load != nil {
			g.load.stop()
		}
	}
	if !d.interrupted.Load() {
		drive.StopAll(procsOf(d.allProviders()), 15*time.Second)
		drive.StopAll(procsOf(d.allGateways()), 15*time.Second)
	}
	d.sup.KillAll()
	for _, in := range d.instances() {
		for _, px := range []*zkProxy{in.proxy, in.gwProxy} {
			if px != nil {
				px.Close()
			}
		}
	}
	if d.rob != nil {
		d.rob.close()
	}
	d.closeZK()
}

func procsOf(ins []*instance) []*drive.Proc {
	var ps []*drive.Proc
	for _, in := range ins {
		ps = append(ps, in.proc)
	}
	return ps
}

// closeZK closes the driver's session and kills the ensemble.
func (d *driver) closeZK() {
	d.zkMu.Lock()
	defer d.zkMu.Unlock()
	if d.reader != nil {
		d.reader.Close()
		d.reader = nil
	}
	if d.cluster != nil {
		_ = d.cluster.Close()
		d.cluster = nil
	}
}

func (d *driver) run(ctx context.Context) ([]groupResult, error) {
	if err := d.build(ctx); err != nil {
		return nil, err
	}
	logf("starting a 3-member ZooKeeper ensemble (zktest)")
	c, err := d.startEnsemble(zktest.Size(3))
	if err != nil {
		return nil, fmt.Errorf("start ZooKeeper: %w", err)
	}
	d.zkMu.Lock()
	d.cluster = c
	d.zkMu.Unlock()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	logf("ensemble serves at %s", strings.Join(d.memberAddrs(c), ","))
	r, err := dialZK(d.memberAddrs(c), d.zkDialer())
	if err != nil {
		return nil, err
	}
	d.zkMu.Lock()
	d.reader = r
	d.zkMu.Unlock()

	if err := d.startAll(ctx); err != nil {
		return nil, err
	}
	for _, g := range d.groups {
		gwURLs := make([]string, len(g.gateways))
		for i, gw := range g.gateways {
			gwURLs[i] = gw.url("")
		}
		run := d.runID
		if g.transport == transportGRPC {
			run += "-" + transportGRPC
		}
		g.load = newLoad(gwURLs, run, d.cfg.rate, d.cfg.workers, d.cfg.reqTimeout)
		if g.transport == transportGRPC {
			g.load.noRetry = []bool{false, true} // the grpc-go gateway retries nothing
		}
		g.load.start()
		logf("%sload: %d requests/s through %d gateways (%s), 20%% POST /api/orders with an Idempotency-Key",
			g.tag(), d.cfg.rate, len(g.gateways), strings.Join(g.names, ", "))
	}

	phases := make([][]*phase, len(d.groups))
	for i, name := range d.cfg.faults {
		phs := make([]*phase, len(d.groups))
		now := time.Now()
		for gi, g := range d.groups {
			phs[gi] = &phase{name: name, start: now}
			if i == 0 {
				phs[gi].start = g.load.started
			}
			phases[gi] = append(phases[gi], phs[gi])
		}
		if err := drive.SleepCtx(ctx, d.cfg.preRoll); err != nil {
			return nil, err
		}
		logf("=== fault %s (%s requests so far)", name, d.completed())
		err := d.fault(ctx, name, phs)
		if err == nil {
			err = d.checkAlive()
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			for _, ph := range phs {
				ph.err = err
			}
			logf("fault %s: %v; no further faults", name, err)
			break
		}
		var rec []string
		for gi, g := range d.groups {
			rec = append(rec, fmt.Sprintf("%s%.0fms", g.tag(), ms(phs[gi].recovered.Sub(phs[gi].end))))
		}
		logf("fault %s done: recovered (routed again) %s after its end", name, strings.Join(rec, ", "))
	}
	if err := drive.SleepCtx(ctx, d.cfg.settle); err != nil {
		return nil, err
	}
	for _, g := range d.groups {
		g.load.stop()
		logf("%sload stopped: %d requests, %d skipped (all workers busy)", g.tag(), g.load.completed(), g.load.skipped.Load())
	}

	// Stop the providers before reading their ledgers.
	drive.StopAll(procsOf(d.allProviders()), 15*time.Second)
	var out []groupResult
	for gi, g := range d.groups {
		samples := g.load.all()
		lg, err := readLedgers(g.ledgers)
		if err != nil {
			return nil, err
		}
		var lgp *ledger
		note := ""
		posts := 0
		for _, s := range samples {
			if s.post && !s.failed {
				posts++
			}
		}
		switch {
		case lg.lines == 0 && posts > 0:
			// Duplicates cannot be counted without the providers'
			// ledgers (PROVIDER_LEDGER); they are reported as 0.
			note = fmt.Sprintf("NOT COUNTED: the providers wrote no ledger (PROVIDER_LEDGER) for %d orders answered OK", posts)
			logf("%swarning: %s", g.tag(), note)
		default:
			lgp = &lg
			note = fmt.Sprintf("%d orders executed, %d distinct keys, from %d ledger files", lg.lines, len(lg.counts), lg.files)
		}
		rs := summarize(phases[gi], samples, lgp, len(g.gateways), g.load.ended)
		for i := range rs {
			rs[i].Transport = g.transport
		}
		out = append(out, groupResult{transport: g.transport, gatewayNames: g.names, results: rs, ledgerNote: note})
	}
	return out, nil
}

// completed says how many requests each group's load completed.
func (d *driver) completed() string {
	var parts []string
	for _, g := range d.groups {
		parts = append(parts, fmt.Sprintf("%s%d", g.tag(), g.load.completed()))
	}
	return strings.Join(parts, ", ")
}

// build compiles the provider and the gateway into the temp dir.
func (d *driver) build(ctx context.Context) error {
	if d.cfg.binDir != "" {
		d.bins = map[string]string{
			providerService: filepath.Join(d.cfg.binDir, "provider"),
			gatewayService:  filepath.Join(d.cfg.binDir, "gateway"),
		}
		return nil
	}
	bin := filepath.Join(d.tmp, "bin")
	logf("building examples/provider and examples/gateway")
	if err := drive.Build(ctx, bin, pkgProvider, pkgGateway); err != nil {
		return err
	}
	d.bins = map[string]string{
		providerService: filepath.Join(bin, "provider"),
		gatewayService:  filepath.Join(bin, "gateway"),
	}
	return nil
}

// newGroup builds the slots of one transport's group, each provider
// behind a proxy of its own.
func (d *driver) newGroup(transport string) (*group, error) {
	g := &group{transport: transport}
	provSvc, gwSvc := providerService, gatewayService
	var provArgs []string
	if transport == transportGRPC {
		provSvc, gwSvc, provArgs = grpcProviderService, grpcGatewayService, []string{"-transport", transportGRPC}
		// gracekit's consumer over endpoint/grpcfactory, and a plain
		// grpc-go ClientConn through grpcresolver.
		g.gateways = []*instance{
			{service: gwSvc, id: gwSvc + "-1", args: []string{"-transport", transportGRPC}},
			{service: gwSvc, id: gwSvc + "-grpcgo", args: []string{"-transport", transportGRPC, "-mode", "resolver"}},
		}
		g.names = []string{"gracekit", "grpc-go"}
	} else {
		for i := 1; i <= nGateways; i++ {
			g.gateways = append(g.gateways, &instance{service: gwSvc, id: fmt.Sprintf("%s-%d", gwSvc, i)})
			g.names = append(g.names, "gracekit")
		}
	}
	if d.rob != nil { // the faults cut gateways off too
		for _, gw := range g.gateways {
			px, err := d.newProxy()
			if err != nil {
				return nil, err
			}
			gw.gwProxy = px
		}
	}
	for i := 1; i <= nProviders; i++ {
		px, err := d.newProxy()
		if err != nil {
			return nil, err
		}
		g.providers = append(g.providers, &instance{service: provSvc, id: fmt.Sprintf("%s-%d", provSvc, i), proxy: px,
			args: provArgs, grpc: transport == transportGRPC})
	}
	return g, nil
}

// startAll starts each group's gateways and providers (each behind its
// proxy) and waits until the gateways route to every provider of their
// group.
func (d *driver) startAll(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(d.tmp, "logs"), 0o755); err != nil {
		return err
	}
	d.secret = drive.RandomHex(32)
	for _, tr := range d.cfg.transports {
		g, err := d.newGroup(tr)
		if err != nil {
			return err
		}
		d.groups = append(d.groups, g)
	}
	for _, g := range d.groups {
		for _, in := range slices.Concat(g.gateways, g.providers) {
			zkServers := strings.Join(d.memberAddrs(d.cluster), ",")
			if in.proxy != nil {
				zkServers = in.proxy.ConnectString()
			} else if in.gwProxy != nil {
				zkServers = in.gwProxy.ConnectString()
			}
			in.vars = map[string]string{
				"GRACEKIT_ZK_SERVERS":   zkServers,
				"GRACEKIT_BASE_PATH":    d.basePath,
				"GRACEKIT_SERVICE":      in.service,
				"GRACEKIT_INSTANCE_ID":  in.id,
				"GRACEKIT_ADDRESS":      "127.0.0.1",
				"GRACEKIT_FLUSH_SECRET": d.secret,
			}
			d.tlsEnv(in.vars)
			if in.proxy == nil { // a gateway
				in.vars["GATEWAY_UPSTREAM"] = g.providers[0].service
				in.vars["GATEWAY_LOOPBACK_ONLY"] = "1"
			} else {
				in.vars["GRACEKIT_FLUSH_GATEWAYS"] = g.gateways[0].service
				in.vars["PROVIDER_LATENCY"] = d.cfg.latency.String()
			}
			if d.rob != nil {
				d.rob.env(d, in)
			}
			if err := d.startInstance(in); err != nil {
				return err
			}
		}
	}
	logf("started %d groups (%s) of %d gateways and %d providers; waiting for them to be ready",
		len(d.groups), strings.Join(d.cfg.transports, ", "), nGateways, nProviders)
	for _, in := range slices.Concat(d.allProviders(), d.allGateways()) {
		if err := d.waitStarted(ctx, in); err != nil {
			return err
		}
	}
	for _, gw := range d.allGateways() {
		if err := waitRoutes(ctx, gw, nProviders, d.cfg.readyLimit); err != nil {
			return err
		}
	}
	return nil
}

// startInstance starts in's next run, a provider on a new port with a
// ledger of its own.
func (d *driver) startInstance(in *instance) error {
	provider := in.proxy != nil
	if in.port == 0 || provider {
		ports, err := zktest.FreePorts(1)
		if err != nil {
			return err
		}
		in.port = ports[0]
	}
	in.runs++
	in.vars["GRACEKIT_PORT"] = strconv.Itoa(in.port)
	if in.grpc {
		in.vars["GRACEKIT_GRPC_PORT"] = strconv.Itoa(in.port)
	}
	bin := d.bins[gatewayService]
	if provider {
		bin = d.bins[providerService]
		l := filepath.Join(d.tmp, "logs", fmt.Sprintf("%s.run%d.ledger", in.id, in.runs))
		in.vars["PROVIDER_LEDGER"] = l
		for _, g := range d.groups {
			if slices.Contains(g.providers, in) {
				g.ledgers = append(g.ledgers, l)
			}
		}
	}
	if provider && d.rob != nil {
		d.rob.started(d, in)
	}
	logPath := filepath.Join(d.tmp, "logs", fmt.Sprintf("%s.run%d.log", in.id, in.runs))
	p, err := d.sup.Start(in.id, bin, append([]string{"-mode", "graceful"}, in.args...), drive.ChildEnv(os.Environ(), in.vars), logPath)
	if err != nil {
		return err
	}
	in.proc = p
	return nil
}

// waitStarted waits until in is ready, starting it again on another port
// when the one it was given was taken meanwhile (zktest.FreePorts can only
// find a port that was free).
func (d *driver) waitStarted(ctx context.Context, in *instance) error {
	for try := 0; ; try++ {
		err := waitReady(ctx, in, d.cfg.readyLimit)
		if err == nil || try == 2 || !in.proc.Exited() || !portTaken(in) {
			return err
		}
		logf("%s: port %d was taken; starting it on another", in.id, in.port)
		if d.rob != nil {
			d.rob.stopping(in, "exited")
		}
		in.port = 0
		if err := d.startInstance(in); err != nil {
			return err
		}
	}
}

// portTaken tells whether in's last run exited because its port was taken.
func portTaken(in *instance) bool {
	return strings.Contains(drive.Tail(in.proc.LogPath(), 5), "address already in use")
}

// waitReady polls the instance's /readyz until it answers 200, or a gRPC
// provider's health service until it is SERVING.
func waitReady(ctx context.Context, in *instance, limit time.Duration) error {
	if in.grpc {
		return drive.WaitGRPCReady(ctx, in.id, in.proc, in.addr(), limit)
	}
	return drive.WaitReady(ctx, in.id, in.proc, in.url("/readyz"), limit)
}

// waitRoutes sends GET /api/quote through the gateway until its answers
// have named every provider.
func waitRoutes(ctx context.Context, gw *instance, providers int, limit time.Duration) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	seen := map[string]bool{}
	last := ""
	deadline := time.Now().Add(limit)
	for {
		if ok, id, why := drive.Probe(client, gw.url("/api/quote?symbol=ABC")); !ok {
			last = why
		} else if id != "" {
			seen[id] = true
		}
		if len(seen) >= providers {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s routed to %d of %d providers within %v (last error: %s); its log %s ends with:\n%s",
				gw.id, len(seen), providers, limit, last, gw.proc.LogPath(), drive.Tail(gw.proc.LogPath(), 15))
		}
		if err := drive.SleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}
