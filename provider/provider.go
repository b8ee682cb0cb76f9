// Package provider assembles the serving side of gracekit in plain Go: an
// instance that listens, serves, registers in ZooKeeper once ready, and
// stops in the order that fails no request (shutdown.Sequence: unready,
// out of service, deregister, flush the gateways, quiesce, drain, close
// the session). It serves net/http or gRPC (shutdown/grpcstop).
// fxmodule's Discovery module is thin glue over this package; tests,
// benchmarks and examples use it directly.
//
//	sess, _ := sd.NewSession("zk1:2181")
//	p, _ := provider.New(sess, provider.Config{
//		Instance: sd.Instance{Name: "quote", Address: "10.0.0.7", Port: 8080},
//		Server:   &http.Server{Addr: ":8080", Handler: mux},
//	})
//	if err := p.Start(ctx); err != nil { ... }
//	<-signals
//	err := p.Stop(stopCtx)
package provider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	pathpkg "path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kit/kit/metrics"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/internal/runstate"
	"github.com/gracekit/gracekit/lifecycle"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/shutdown/flush"
	"github.com/gracekit/gracekit/shutdown/grpcstop"
)

// Config describes a provider instance. Zero durations take shutdown's
// defaults.
type Config struct {
	// Instance is what is registered: Name, Address and Port (or SSLPort)
	// are required; an empty ID gets a random UUID, as Spring does.
	Instance sd.Instance
	// Server serves the instance: an *http.Server, whose Handler New wraps
	// once (see HTTPHandler) and whose Addr it listens on unless Listener
	// or Addr is set; or grpcstop.Server(s), with grpcstop's interceptors
	// over Tracker. Required.
	Server shutdown.Server
	// Listener, if set, is served instead of listening on Addr.
	Listener net.Listener
	// Addr is the TCP address to listen on; empty takes the *http.Server's.
	Addr string

	// GRPC, if set, is a gRPC server the instance serves, beside Server
	// (grpc-gateway style: two ports, one registration, one stop) or
	// alone. Build it over Tracker, so that its calls count in the drain:
	//
	//	tracker := new(shutdown.Tracker)
	//	gs := grpc.NewServer(grpcstop.ServerOptions(tracker)...)
	//
	// The provider registers the standard health service on it, which
	// follows the instance's readiness (NOT_SERVING from the stop's first
	// step; Watch streams end at the drain); register none yourself. The
	// gRPC port is registered in the metadata (sd.MetadataGRPCPort), and
	// as the Port when there is no Server.
	GRPC *grpc.Server
	// GRPCListener, if set, is what GRPC serves; otherwise it listens on
	// GRPCAddr (with no Server: on Listener or Addr when these are empty).
	GRPCListener net.Listener
	GRPCAddr     string
	// Tracker counts the instance's requests; nil makes one. Required with
	// GRPC: the one its interceptors count in.
	Tracker *shutdown.Tracker
	// ReadyCheck, if set, must pass before registration.
	ReadyCheck func(ctx context.Context) error
	// Health, with a Check, takes the running instance out of rotation
	// while it is sick and brings it back when it recovers (HealthCheck).
	Health HealthCheck

	// Flush: the gateways told to evict this instance at stop.
	Flush Flush

	// Stop bounds (see shutdown.Config).
	StartTimeout, OutOfServiceTimeout, DeregisterTimeout, FlushTimeout time.Duration
	QuietWindow, MaxQuiesce, DrainTimeout, CloseTimeout                time.Duration
	// StopBudget is what the stop bounds must fit in (default
	// lifecycle.DefaultStopBudget, fx's default stop timeout).
	StopBudget time.Duration
}

// Flush says which gateways a stopping provider tells to evict it.
type Flush struct {
	// Secret signs flush requests (at least flush.MinSecretLen bytes);
	// required with Targets or Gateways.
	Secret []byte
	// Targets are gateways' flush URLs, called with a signed POST.
	Targets []string
	// SpringTargets are Spring-style flush URLs, called unsigned with
	// GET ?applicationName=&host=&id=.
	SpringTargets []string
	// Gateways are gateway services whose instances, discovered in
	// ZooKeeper, are flushed at the URL they registered (consumer.FlushURL).
	// They need WithConsumer.
	Gateways []string
}

func (f Flush) any() bool { return len(f.Targets)+len(f.SpringTargets)+len(f.Gateways) > 0 }

// Option configures a Provider.
type Option interface{ applyProvider(*options) error }

type options struct {
	logger    *slog.Logger
	registrar []sd.RegistrarOption
	notifier  []flush.NotifierOption
	lifecycle []lifecycle.Option
	consumer  *consumer.Consumer
	routes    []route

	healthCounter metrics.Counter
	registerLater bool // WithRegisterWhenReachable
}

type route struct {
	path    string
	handler http.Handler
}

type optionFunc func(*options) error

func (f optionFunc) applyProvider(o *options) error { return f(o) }

// WithLogger sets the logger of the provider and its parts (default:
// slog.Default()); the stop steps are logged through lifecycle.SlogListener.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) error {
		if l == nil {
			return fmt.Errorf("provider: nil logger")
		}
		o.logger = l
		return nil
	})
}

// WithRegistrarOptions are given to sd.NewRegistrar (base path, codec...).
func WithRegistrarOptions(opts ...sd.RegistrarOption) Option {
	return optionFunc(func(o *options) error { o.registrar = append(o.registrar, opts...); return nil })
}

// WithNotifierOptions are given to flush.NewNotifier (retries, client...).
func WithNotifierOptions(opts ...flush.NotifierOption) Option {
	return optionFunc(func(o *options) error { o.notifier = append(o.notifier, opts...); return nil })
}

// WithLifecycleOptions are given to the Sequence (lifecycle.WithListener...).
func WithLifecycleOptions(opts ...lifecycle.Option) Option {
	return optionFunc(func(o *options) error { o.lifecycle = append(o.lifecycle, opts...); return nil })
}

// WithConsumer is the consumer that watches Flush.Gateways; it must share
// the provider's session and be started before the provider.
func WithConsumer(c *consumer.Consumer) Option {
	return optionFunc(func(o *options) error {
		if c == nil {
			return fmt.Errorf("provider: nil consumer")
		}
		o.consumer = c
		return nil
	})
}

// WithRoute serves h at path next to the probes, outside the Tracker (a
// gateway's flush handler, say), when Server is an *http.Server. path is
// matched exactly: a clean absolute path other than /, /readyz and /livez.
func WithRoute(path string, h http.Handler) Option {
	return optionFunc(func(o *options) error {
		if h == nil || !strings.HasPrefix(path, "/") || pathpkg.Clean(path) != path || path == "/" || path == "/readyz" || path == "/livez" {
			return fmt.Errorf("provider: route %q needs a handler and a clean absolute path other than /, /readyz and /livez", path)
		}
		o.routes = append(o.routes, route{path, h})
		return nil
	})
}

// Provider is one serving instance's whole life. Its methods are safe for
// concurrent use.
type Provider struct {
	sess    *sd.Session
	cfg     Config
	opts    options
	log     *slog.Logger
	tracker *shutdown.Tracker
	ready   *shutdown.Readiness
	notify  *flush.Notifier
	grpc    *grpcstop.Adapter // Config.GRPC's, nil without
	gw      atomic.Pointer[flush.TargetSource]
	run     runstate.Machine

	mu       sync.Mutex
	seq      *shutdown.Sequence // the last Start's (one per attempt: a Sequence runs once)
	reg      *sd.Registrar      // made at Start, over the session's client
	lnClosed bool               // Config.Listener was closed
	shutDown bool               // a failed Start shut the servers down
	health   *healthLoop        // while started with a HealthCheck
	drain    *drainLoop         // while started
	verdict  verdict            // what holds the instance out of rotation
	client   *sd.Client         // the session's, made at Start
	late     lateRegistration   // WithRegisterWhenReachable's (register_later.go)
}

// ErrServerShutDown is returned by a Start after a failed Start that had
// served already (a ReadyCheck or a registration that failed): undoing it
// shut the servers down, and net/http and grpc-go servers never serve
// again. Build a new Provider, with new servers, to try again.
var ErrServerShutDown = errors.New("provider: the servers were shut down by an earlier failed Start (net/http and grpc-go servers never serve again); build a new Provider with new servers to start again")

// ErrListenerClosed is returned by a Start after a failed Start or a Stop
// closed Config.Listener: build the Provider with a new Listener, or with
// Addr, to try again.
var ErrListenerClosed = errors.New("provider: Config.Listener was closed by an earlier failed Start or a Stop; give New a new one, or an Addr, to start again")

// New checks cfg and builds the provider's parts. It does no I/O: Start
// connects, listens and registers. When Server is an *http.Server, its
// Handler is wrapped here, once (HTTPHandler).
func New(sess *sd.Session, cfg Config, opts ...Option) (*Provider, error) {
	if sess == nil {
		return nil, fmt.Errorf("provider: nil session (want one from sd.NewSession)")
	}
	if hs, ok := cfg.Server.(*http.Server); ok && hs == nil {
		cfg.Server = nil
	}
	if cfg.Server == nil && cfg.GRPC == nil {
		return nil, fmt.Errorf("provider: Config.Server and Config.GRPC are nil (want an *http.Server, a *grpc.Server, or both)")
	}
	if cfg.GRPC != nil && cfg.Tracker == nil {
		return nil, fmt.Errorf("provider: Config.GRPC needs Config.Tracker, the one its interceptors count in: grpc.NewServer(grpcstop.ServerOptions(tracker)...)")
	}
	if cfg.GRPC != nil {
		if _, ok := cfg.GRPC.GetServiceInfo()[healthpb.Health_ServiceDesc.ServiceName]; ok {
			return nil, fmt.Errorf("provider: Config.GRPC has a health service registered already: register none, the provider's follows the instance's readiness")
		}
		if cfg.Server == nil && cfg.GRPCListener == nil && cfg.GRPCAddr == "" {
			cfg.GRPCListener, cfg.GRPCAddr, cfg.Listener, cfg.Addr = cfg.Listener, cfg.Addr, nil, ""
		}
	}
	o := options{logger: slog.Default()}
	for _, opt := range opts {
		if err := opt.applyProvider(&o); err != nil {
			return nil, err
		}
	}
	// The Registrar is made at Start; its options (a base path) are
	// refused here, at build.
	if err := sd.CheckRegistrarOptions(o.registrar...); err != nil {
		return nil, fmt.Errorf("provider: WithRegistrarOptions: %w", err)
	}
	if err := samePort(cfg); err != nil {
		return nil, err
	}
	if len(cfg.Flush.Gateways) > 0 && o.consumer == nil {
		return nil, fmt.Errorf("provider: Flush.Gateways %v need WithConsumer, which watches them", cfg.Flush.Gateways)
	}
	inst := cfg.Instance
	if inst.ID == "" {
		inst.ID = uuid.NewString()
	}
	if !sd.ValidNodeName(inst.Name) || inst.Address == "" || (inst.Port == 0 && inst.SSLPort == 0) {
		return nil, fmt.Errorf("provider: Config.Instance %+v needs a Name (no '/'), an Address and a Port or SSLPort", inst)
	}
	if err := sd.CheckMetadata(inst.Metadata); err != nil {
		return nil, fmt.Errorf("provider: Config.Instance.Metadata: %w", err)
	}
	if !sd.ValidHost(inst.Address) {
		return nil, fmt.Errorf("provider: Config.Instance.Address %q: want a host name or an IP address, without a port, a scheme or spaces (IPv6 without brackets)", inst.Address)
	}
	if cfg.GRPC != nil {
		port, err := grpcPort(cfg)
		if err != nil {
			return nil, err
		}
		inst.Metadata = maps.Clone(inst.Metadata)
		if inst.Metadata == nil {
			inst.Metadata = map[string]string{}
		}
		inst.Metadata[sd.MetadataGRPCPort] = strconv.Itoa(port)
	}
	if cfg.Health.Check != nil {
		h, err := cfg.Health.withDefaults()
		if err != nil {
			return nil, err
		}
		cfg.Health = h
	}
	cfg.Instance = inst
	tracker := cfg.Tracker
	if tracker == nil {
		tracker = &shutdown.Tracker{}
	}
	p := &Provider{sess: sess, cfg: cfg, opts: o, log: o.logger.With("component", "provider", "service", inst.Name, "instance", inst.ID),
		tracker: tracker, ready: &shutdown.Readiness{}, verdict: verdict{poke: make(chan struct{}, 1)}}
	if cfg.GRPC != nil {
		hs := health.NewServer()
		p.grpc = grpcstop.Server(cfg.GRPC, grpcstop.WithHealth(hs))
		services := slices.Collect(maps.Keys(cfg.GRPC.GetServiceInfo()))
		grpcstop.Health(p.ready, hs, services...) // for the provider's life
	}
	n, err := p.notifier()
	if err != nil {
		return nil, err
	}
	p.notify = n
	// The stop plan is checked here, once; each Start builds its own from
	// the same parts.
	seq, err := p.newSequence(func(context.Context) error { return nil })
	if err != nil {
		return nil, err
	}
	p.seq = seq
	if hs, ok := cfg.Server.(*http.Server); ok && hs != nil {
		hs.Handler = p.HTTPHandler(hs.Handler)
	}
	return p, nil
}

// newSequence builds the Sequence of one Start; closeSession gives the
// session's share back.
func (p *Provider) newSequence(closeSession func(context.Context) error) (*shutdown.Sequence, error) {
	cfg := p.cfg
	budget := cfg.StopBudget
	if budget == 0 {
		budget = lifecycle.DefaultStopBudget
	}
	server, ln, addr := cfg.Server, cfg.Listener, cfg.Addr
	var more []shutdown.Served
	switch {
	case p.grpc != nil && server == nil:
		server, ln, addr = p.grpc, cfg.GRPCListener, cfg.GRPCAddr
	case p.grpc != nil:
		more = []shutdown.Served{{Server: p.grpc, Listener: cfg.GRPCListener, Addr: cfg.GRPCAddr}}
	}
	seq, err := shutdown.NewSequence(shutdown.Config{
		Registration: registration{p}, Tracker: p.tracker, Readiness: p.ready, Notifier: p.notify,
		Server: server, Listener: ln, Addr: addr, More: more, ReadyCheck: cfg.ReadyCheck,
		CloseSession: closeSession,
		StartTimeout: cfg.StartTimeout, OutOfServiceTimeout: cfg.OutOfServiceTimeout, DeregisterTimeout: cfg.DeregisterTimeout,
		FlushTimeout: cfg.FlushTimeout, QuietWindow: cfg.QuietWindow, MaxQuiesce: cfg.MaxQuiesce,
		DrainTimeout: cfg.DrainTimeout, CloseTimeout: cfg.CloseTimeout,
	}, append([]lifecycle.Option{lifecycle.StopBudget(budget), lifecycle.WithListener(lifecycle.SlogListener(p.opts.logger))}, p.opts.lifecycle...)...)
	if err != nil {
		return nil, fmt.Errorf("provider: %w", err)
	}
	return seq, nil
}

// notifier builds the flush Notifier; nil without flush targets.
func (p *Provider) notifier() (*flush.Notifier, error) {
	f := p.cfg.Flush
	if !f.any() {
		return nil, nil
	}
	opts := []flush.NotifierOption{flush.WithLogger(p.opts.logger), flush.Registration(p.czxid)}
	if len(f.Targets) > 0 {
		opts = append(opts, flush.StaticTargets(f.Targets...))
	}
	if len(f.SpringTargets) > 0 {
		opts = append(opts, flush.SpringTargets(f.SpringTargets...))
	}
	if len(f.Gateways) > 0 {
		opts = append(opts, flush.Targets(flush.TargetSourceFunc(func() []string {
			if src := p.gw.Load(); src != nil {
				return (*src).FlushTargets()
			}
			return nil
		})))
	}
	secret := f.Secret
	if len(f.Targets)+len(f.Gateways) == 0 && len(secret) == 0 {
		secret = make([]byte, flush.MinSecretLen) // Spring targets only: unsigned; the key is never used
	}
	i := p.cfg.Instance
	n, err := flush.NewNotifier(flush.Self{Service: i.Name, ID: i.ID, Address: i.Address, Port: i.Port}, secret, append(opts, p.opts.notifier...)...)
	if err != nil {
		return nil, fmt.Errorf("provider: flush: %w", err)
	}
	return n, nil
}

// HTTPHandler wraps user (nil is http.DefaultServeMux): /readyz and /livez
// answer from the Readiness, WithRoute's paths are served as they are,
// and every other request goes through the Tracker (counted, and marked
// with the closing signal once the stop began) to user exactly as the
// server received it: no cleaning, no redirect, as if user were the
// server's Handler. Probes and routes match the request's path exactly.
// New applies it to an *http.Server's Handler.
func (p *Provider) HTTPHandler(user http.Handler) http.Handler {
	if user == nil {
		user = http.DefaultServeMux
	}
	own := map[string]http.Handler{
		"/readyz": p.ready.ReadyHandler(),
		"/livez":  p.ready.LiveHandler(),
	}
	for _, r := range p.opts.routes {
		own[r.path] = r.handler
	}
	tracked := p.tracker.Middleware(user)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, ok := own[r.URL.Path]; ok {
			h.ServeHTTP(w, r)
			return
		}
		tracked.ServeHTTP(w, r)
	})
}

// Start connects the session (or joins it), then listens, serves, runs the
// ready check, registers and turns ready. On failure it undoes what it did
// (the session's share, the listener, the registration) and returns the
// error; a *sd.ConflictError says another live session holds this
// instance's id. Start follows lifecycle.State's table: a second Start
// returns lifecycle.ErrStarted and a Start after Stop lifecycle.ErrStopped,
// both changing nothing; a Start with a done ctx returns its error and
// changes nothing; a Start after a failed one tries again, when the
// failure came before the servers served (the session, the listen):
// after a failure that shut the servers down (the ready check, the
// registration) it returns ErrServerShutDown, and with Config.Listener,
// which the failure closed, ErrListenerClosed. A Stop during Start
// cancels it.
func (p *Provider) Start(ctx context.Context) error {
	if err := p.run.Start(ctx, p.start); err != nil {
		return fmt.Errorf("provider: %w", err)
	}
	return nil
}

func (p *Provider) start(ctx context.Context) error {
	p.mu.Lock()
	closed := p.lnClosed && (p.cfg.Listener != nil || p.cfg.GRPCListener != nil)
	shutDown := p.shutDown
	p.mu.Unlock()
	switch {
	case shutDown:
		return ErrServerShutDown
	case closed:
		return ErrListenerClosed
	}
	client, err := p.sess.Start(ctx)
	if err != nil {
		p.closeListener() // the Sequence, which would close it, never started
		return err
	}
	var once sync.Once
	release := func(ctx context.Context) (err error) {
		once.Do(func() { err = p.sess.Stop(ctx) })
		return err
	}
	reg, err := sd.NewRegistrar(client, p.cfg.Instance,
		append([]sd.RegistrarOption{sd.WithLogger(p.opts.logger), sd.OnRegistrarEvent(p.onRegistrarEvent)}, p.opts.registrar...)...)
	if err == nil && len(p.cfg.Flush.Gateways) > 0 {
		err = p.watchGateways(ctx, client) // register_later.go
	}
	var seq *shutdown.Sequence
	if err == nil {
		seq, err = p.newSequence(release)
	}
	if err != nil {
		p.endLateGateways()
		_ = release(context.WithoutCancel(ctx))
		p.closeListener()
		return err
	}
	p.mu.Lock()
	p.reg, p.seq, p.client = reg, seq, client
	p.mu.Unlock()
	if err := seq.Start(ctx); err != nil {
		// The rollback gave the share back and closed what it served; a
		// listener given and never served is closed here. A ctx that
		// ended before the Sequence's first step (a Stop during Start,
		// just after the session's Start) rolls nothing back, the
		// session's release included: it is given here (once, whichever
		// gives it). A goleak check caught the open session.
		p.endLateGateways()
		_ = release(context.WithoutCancel(ctx))
		p.closeListener()
		if seq.Served() {
			p.mu.Lock()
			p.shutDown = true
			p.mu.Unlock()
		}
		return err
	}
	p.startDrain()
	p.startHealth()
	return nil
}

// closeListener closes Config.Listener, once: the Provider owns it from
// New on.
func (p *Provider) closeListener() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.lnClosed {
		for _, ln := range []net.Listener{p.cfg.Listener, p.cfg.GRPCListener} {
			if ln != nil {
				_ = ln.Close()
			}
		}
	}
	p.lnClosed = true
}

// Stop runs the whole stop sequence within ctx (see shutdown.Sequence.Stop
// for what holds when ctx is short) and returns its errors joined; Report
// tells how it went. It follows lifecycle.State's table: a Stop before
// Start, or after a failed Start, has nothing to undo but closes
// Config.Listener; a Stop during Start cancels the start and waits for it
// within ctx (the start stops what it started itself when ctx ends first);
// later Stops wait for the first and return its result. After Stop, Start
// returns lifecycle.ErrStopped. Each stop step is logged as it ends
// ("lifecycle step done", step=<shutdown.Step* name>), and the stop's last
// line, "stop done", sums it up: the steps with their times, the total,
// and the count of failed steps (at warn when one failed, naming them).
func (p *Provider) Stop(ctx context.Context) error {
	return p.run.Stop(ctx, func(ctx context.Context) error {
		// The health check and the drain loop end first: a stopping
		// instance never returns to UP.
		begin := time.Now()
		p.stopDrain()
		herr := p.stopHealth(ctx)
		err := errors.Join(herr, p.sequence().Stop(ctx))
		p.logStopSummary(p.sequence().Report(), time.Since(begin))
		return err
	}, p.closeListener)
}

// State is where the provider is in its life.
func (p *Provider) State() lifecycle.State { return p.run.State() }

func (p *Provider) sequence() *shutdown.Sequence {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

// Tracker counts the requests in flight; gRPC servers wire grpcstop's
// interceptors over it.
func (p *Provider) Tracker() *shutdown.Tracker { return p.tracker }

// Readiness is the state behind /readyz (and grpcstop.Health).
func (p *Provider) Readiness() *shutdown.Readiness { return p.ready }

// Report tells how the last stop went; call it after Stop.
func (p *Provider) Report() shutdown.Report { return p.sequence().Report() }

// Addr is the address served, once Start listened; nil before. With both
// Server and GRPC it is Server's; see GRPCAddr.
func (p *Provider) Addr() net.Addr { return p.sequence().Addr() }

// GRPCAddr is the address Config.GRPC serves, once Start listened; nil
// before, or without GRPC.
func (p *Provider) GRPCAddr() net.Addr {
	if p.grpc == nil {
		return nil
	}
	addrs := p.sequence().Addrs()
	if len(addrs) == 0 {
		return nil
	}
	return addrs[len(addrs)-1]
}

// samePort refuses a Server and a GRPC that would listen on one port:
// said at build rather than as Start's "address already in use", which
// reads like another process holding the port.
func samePort(cfg Config) error {
	if cfg.Server == nil || cfg.GRPC == nil || cfg.Listener != nil || cfg.GRPCListener != nil {
		return nil
	}
	addr := cfg.Addr
	if hs, ok := cfg.Server.(*http.Server); ok && addr == "" {
		addr = hs.Addr
	}
	_, hp, err1 := net.SplitHostPort(addr)
	_, gp, err2 := net.SplitHostPort(cfg.GRPCAddr)
	if err1 != nil || err2 != nil || hp != gp || hp == "" || hp == "0" {
		return nil
	}
	return fmt.Errorf("provider: Config.GRPCAddr %q and the HTTP server's address %q have one port: the two servers need a port each; give GRPCAddr another", cfg.GRPCAddr, addr)
}

// grpcPort is the port GRPC is registered with: its listener's, its
// address's, or the instance's Port when GRPC is served alone.
func grpcPort(cfg Config) (int, error) {
	if ln := cfg.GRPCListener; ln != nil {
		if a, ok := ln.Addr().(*net.TCPAddr); ok && a.Port > 0 {
			return a.Port, nil
		}
	}
	if _, ps, err := net.SplitHostPort(cfg.GRPCAddr); err == nil {
		if port, err := strconv.Atoi(ps); err == nil && port > 0 && port < 65536 {
			return port, nil
		}
	}
	if cfg.Server == nil && cfg.Instance.Port > 0 {
		return cfg.Instance.Port, nil
	}
	return 0, fmt.Errorf("provider: Config.GRPCAddr %q names no port, and Config.GRPCListener is nil: the gRPC port is registered (metadata %s), so it must be known before Start", cfg.GRPCAddr, sd.MetadataGRPCPort)
}

// Instance is what the provider registers (its ID filled in).
func (p *Provider) Instance() sd.Instance { return p.cfg.Instance }

// Registrar is the instance's registration, nil before Start.
func (p *Provider) Registrar() *sd.Registrar {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reg
}

func (p *Provider) czxid() int64 {
	if r := p.Registrar(); r != nil {
		return r.Czxid()
	}
	return 0
}

// registration is the Registrar, made at Start, as the Sequence drives it.
type registration struct{ p *Provider }

func (r registration) RegisterContext(ctx context.Context) error {
	r.p.mu.Lock()
	reg, client := r.p.reg, r.p.client
	r.p.mu.Unlock()
	return r.p.register(ctx, reg, client)
}

// Registered is false while a background registration
// (WithRegisterWhenReachable) has not succeeded: the stop then flushes no
// gateway (shutdown.Sequence).
func (r registration) Registered() bool {
	l := &r.p.late
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cancel == nil || l.registered
}

func (r registration) SetStatus(ctx context.Context, s sd.Status) error {
	if pending, err := r.p.endLate(ctx); pending || err != nil {
		return err // never registered: nothing to take out
	}
	if reg := r.p.Registrar(); reg != nil {
		return reg.SetStatus(ctx, s)
	}
	return sd.ErrNotRegistered
}

func (r registration) DeregisterContext(ctx context.Context) error {
	pending, err := r.p.endLate(ctx)
	if err != nil {
		return err
	}
	r.p.mu.Lock()
	reg, client := r.p.reg, r.p.client
	r.p.mu.Unlock()
	if reg == nil || pending && !client.HadSession() {
		return nil // nothing was ever created
	}
	return reg.DeregisterContext(ctx)
}
