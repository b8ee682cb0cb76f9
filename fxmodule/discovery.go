package fxmodule

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"go.uber.org/fx"

	"github.com/gracekit/gracekit/lifecycle"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/shutdown/flush"
)

// Discovery is the provider-side module. It needs a Config and the app's
// *http.Server in the container, and provides:
//
//   - *sd.Client: the ZooKeeper session;
//   - *sd.Registrar: this instance's registration;
//   - *Instancers: sd.Instancers for other services over the same session;
//     a service whose first load fails is an error, not an empty service;
//   - *shutdown.Readiness and *shutdown.Tracker;
//   - *shutdown.Sequence: the start and stop sequence, whose Report tells
//     how the stop went.
//
// The module invokes itself: it appends its lifecycle hook when the app is
// built, without an fx.Invoke from the user. OnStart wraps the server's
// Handler (nil is http.DefaultServeMux) so that /readyz and /livez are answered and every
// other request goes through the Tracker, then listens on Config.Port,
// serves, registers and turns ready; each start step ends a margin before
// fx's start deadline, so that an error such as a *sd.ConflictError (the
// instance id is held by another live session) is what Start returns, not
// fx's deadline error. OnStop runs the whole stop sequence: unready, out of
// service, deregister, flush the gateways, quiesce, drain, close the
// ZooKeeper session. fx abandons OnStop at its stop deadline, so the
// sequence takes every step's bound from that deadline (see
// shutdown.Sequence.Stop): the unready, deregister, drain and session
// close steps always run and finish before it, sharing the time in
// proportion to their timeouts when fx's stop timeout is shorter than the
// sequence's bounds (then the out-of-service, flush and quiesce steps are
// cut short or skipped, and the hook logs a warning). A second hook,
// appended when the session is made and so run after the first, closes the
// session when the app stops after a failed start. If building the app
// fails after the session was made (an fx.Invoke returning an error, say),
// fx runs no stop hook and the session lives until the process exits,
// which is what a failed fx.New leads to anyway; configuration errors are
// found before connecting.
//
// An optional *slog.Logger in the container receives the lifecycle events
// (step, phase, duration, err) and the logs of sd and shutdown; without one
// they are silent.
var Discovery = fx.Module("gracekit.discovery",
	fx.Provide(discoverySettings),
	core,
)

// core is what Discovery and Gateway share; it needs a *settings.
var core = fx.Options(
	fx.Provide(
		newSession,
		func(s *session) *sd.Client { return s.client },
		newInstancers,
		newRegistrar,
		func() *shutdown.Readiness { return &shutdown.Readiness{} },
		func() *shutdown.Tracker { return &shutdown.Tracker{} },
		newSequence,
	),
	fx.Invoke(appendHooks),
)

func discoverySettings(c Config) (*settings, error) { return c.check(false) }

// loggerParams is the optional logger the modules use.
type loggerParams struct {
	fx.In

	// Logger receives lifecycle events and component logs; nil is silent.
	Logger *slog.Logger `optional:"true"`
	// Metrics, when supplied, are updated (see metrics.go).
	Metrics *Metrics `optional:"true"`
}

func (p loggerParams) logger() *slog.Logger {
	if p.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.Logger
}

// session owns the ZooKeeper client and what must end before it, such as
// Instancers and Endpointers, closed in reverse order of registration.
type session struct {
	client *sd.Client

	mu      sync.Mutex
	closers []func()
	closed  bool
	once    sync.Once
}

// onClose registers f to run at close. It reports false, without
// registering, when the session is closed already.
func (s *session) onClose(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.closers = append(s.closers, f)
	return true
}

// close runs the closers in reverse and closes the client. It is
// idempotent; Client.Close bounds the wait.
func (s *session) close() {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		fs := s.closers
		s.closers = nil
		s.mu.Unlock()
		for i := len(fs) - 1; i >= 0; i-- {
			fs[i]()
		}
	})
	s.client.Close()
}

// closeContext closes the session, returning early with ctx's error if ctx
// ends first; the close goes on in the background and ends in bounded time.
func (s *session) closeContext(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.close()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fxmodule: close ZooKeeper session: %w", ctx.Err())
	}
}

func newSession(lc fx.Lifecycle, s *settings, lp loggerParams) (*session, error) {
	opts := []sd.ClientOption{sd.SessionTimeout(s.ZKSessionTimeout), sd.Logger(lp.logger())}
	if s.authUser != "" {
		opts = append(opts, sd.DigestAuth(s.authUser, s.authPassword))
	}
	c, err := sd.NewClient(s.ZKServers, opts...)
	if err != nil {
		return nil, fmt.Errorf("fxmodule: connect to ZooKeeper (Config.ZKServers %q): %w", s.ZKServers, err)
	}
	sess := &session{client: c}
	// Appended before the Sequence's hook, so it stops after it: a no-op
	// after a full stop, and the only close when the app stops after a
	// failed start, or when fx skipped the Sequence's hook.
	lc.Append(fx.StopHook(func() { sess.close() }))
	return sess, nil
}

// Instancers hands out sd.Instancers over the module's ZooKeeper session,
// one per service, created on first use and stopped when the session
// closes. It is safe for concurrent use.
type Instancers struct {
	sess *session
	opts []sd.InstancerOption
	met  *Metrics

	mu sync.Mutex
	m  map[string]*instancerEntry // nil once the session closed
}

// instancerEntry is an Instancer, or the one being created.
type instancerEntry struct {
	in    *sd.Instancer
	err   error
	ready chan struct{} // closed once in or err is set
}

func newInstancers(sess *session, s *settings, lp loggerParams) *Instancers {
	in := &Instancers{
		sess: sess,
		opts: []sd.InstancerOption{sd.BasePath(s.BasePath), sd.WithLogger(lp.logger())},
		m:    map[string]*instancerEntry{},
		met:  lp.metrics(),
	}
	sess.onClose(in.stop)
	return in
}

// Instancer is InstancerContext bounded by the session timeout.
func (in *Instancers) Instancer(service string) (*sd.Instancer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), in.sess.client.SessionTimeout())
	defer cancel()
	return in.InstancerContext(ctx, service)
}

// InstancerContext returns the Instancer of service, starting it on first
// use, without holding up calls for other services. The first call waits
// until the service was read from ZooKeeper without error, as
// sd.NewInstancerContext does; when ctx ends first it returns the read's
// error (sd.ErrDisconnected, zk.ErrNoAuth...), or ctx's error, and keeps no
// Instancer, so that a later call tries again: a service that could not be
// read never looks like an empty, healthy one. A missing service node is
// not an error: it is a service without instances. Calls that arrive
// while the first one waits get its result. Once returned, an Instancer
// reports later read errors through its Err method and its events. It
// returns sd.ErrClosed after the session closed.
func (in *Instancers) InstancerContext(ctx context.Context, service string) (*sd.Instancer, error) {
	in.mu.Lock()
	if in.m == nil {
		in.mu.Unlock()
		return nil, sd.ErrClosed
	}
	if e, ok := in.m[service]; ok {
		in.mu.Unlock()
		select {
		case <-e.ready:
			return e.in, e.err
		case <-ctx.Done():
			return nil, fmt.Errorf("fxmodule: wait for the first load of service %q: %w", service, ctx.Err())
		}
	}
	e := &instancerEntry{ready: make(chan struct{})}
	in.m[service] = e
	in.mu.Unlock()

	i, err := sd.NewInstancerContext(ctx, in.sess.client, service, append(in.met.instancerOptions(service), in.opts...)...)
	in.mu.Lock()
	closed := in.m == nil
	switch {
	case closed && err == nil:
		err = sd.ErrClosed
	case !closed && err != nil:
		delete(in.m, service) // let a later call try again
	}
	if err == nil {
		e.in = i
	}
	e.err = err
	close(e.ready)
	in.mu.Unlock()
	if closed && i != nil {
		i.Stop() // stop ran meanwhile and could not see it
	}
	return e.in, e.err
}

func (in *Instancers) stop() {
	in.mu.Lock()
	m := in.m
	in.m = nil
	in.mu.Unlock()
	for _, e := range m {
		select {
		case <-e.ready:
			if e.in != nil {
				e.in.Stop()
			}
		default: // still being created: its creator stops it
		}
	}
}

func newRegistrar(sess *session, s *settings, lp loggerParams) (*sd.Registrar, error) {
	r, err := sd.NewRegistrar(sess.client, sd.Instance{
		Name:     s.Service,
		ID:       s.InstanceID,
		Address:  s.Address,
		Port:     s.Port,
		Metadata: s.Metadata,
	}, sd.BasePath(s.BasePath), sd.WithLogger(lp.logger()))
	if err != nil {
		return nil, fmt.Errorf("fxmodule: registrar: %w", err)
	}
	return r, nil
}

// sequenceParams are what the Sequence is built from.
type sequenceParams struct {
	fx.In

	Settings   *settings
	Session    *session
	Server     *http.Server
	Registrar  *sd.Registrar
	Instancers *Instancers
	Readiness  *shutdown.Readiness
	Tracker    *shutdown.Tracker
	Routes     []route `group:"gracekit.routes"`
	Log        loggerParams
}

// route is a handler served next to the probes, outside the Tracker.
type route struct {
	pattern string
	handler http.Handler
}

// sequence is the Sequence with what its hook needs.
type sequence struct {
	*shutdown.Sequence
	server  *http.Server
	handler func(user http.Handler) http.Handler
}

func newSequence(p sequenceParams) (*shutdown.Sequence, *sequence, error) {
	s := p.Settings
	log := p.Log.logger()
	notifier, err := newNotifier(p, log)
	if err != nil {
		return nil, nil, err
	}
	cfg := s.sequenceConfig()
	cfg.Registration = p.Registrar
	cfg.Tracker = p.Tracker
	cfg.Readiness = p.Readiness
	cfg.Notifier = notifier
	cfg.Server = p.Server
	cfg.CloseSession = p.Session.closeContext
	// The budget was checked with the settings, before connecting.
	seq, err := shutdown.NewSequence(cfg, append([]lifecycle.Option{lifecycle.StopBudget(s.StopTimeout), lifecycle.WithListener(lifecycle.SlogListener(p.Log.Logger))}, p.Log.metrics().lifecycleOptions()...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("fxmodule: stop sequence: %w", err)
	}
	routes := p.Routes
	ready := p.Readiness
	tracker := p.Tracker
	wrap := func(user http.Handler) http.Handler {
		if user == nil {
			user = http.DefaultServeMux
		}
		mux := http.NewServeMux()
		mux.Handle("/readyz", ready.ReadyHandler())
		mux.Handle("/livez", ready.LiveHandler())
		for _, r := range routes {
			mux.Handle(r.pattern, r.handler)
		}
		mux.Handle("/", tracker.Middleware(user))
		return mux
	}
	return seq, &sequence{Sequence: seq, server: p.Server, handler: wrap}, nil
}

// newNotifier returns the Notifier of the flush targets, nil when there are
// none. Gateway services are watched from now on, so that Flush, which
// must not block, finds them listed.
func newNotifier(p sequenceParams, log *slog.Logger) (*flush.Notifier, error) {
	s := p.Settings
	if !s.hasFlushTargets() {
		return nil, nil
	}
	self := p.Registrar.Instance()
	// Signed flushes name the registration that is stopping: the stop
	// deregisters before it flushes, and Czxid outlives the deregistration.
	opts := append([]flush.NotifierOption{flush.WithLogger(log), flush.Registration(p.Registrar.Czxid)}, p.Log.metrics().notifierOptions()...)
	if len(s.FlushTargets) > 0 {
		opts = append(opts, flush.StaticTargets(s.FlushTargets...))
	}
	if len(s.SpringFlushTargets) > 0 {
		opts = append(opts, flush.SpringTargets(s.SpringFlushTargets...))
	}
	if len(s.FlushGateways) > 0 {
		var gws []*sd.Instancer
		for _, g := range s.FlushGateways {
			in, err := p.Instancers.Instancer(g)
			if err != nil {
				return nil, fmt.Errorf("fxmodule: watch flush gateway service %q: %w", g, err)
			}
			gws = append(gws, in)
		}
		opts = append(opts, flush.Targets(flush.TargetSourceFunc(func() []string {
			return gatewayTargets(gws, self)
		})))
	}
	secret := []byte(s.FlushSecret)
	if len(secret) == 0 {
		// Only Spring targets, which are unsigned; the Notifier still
		// wants a key, which nobody needs to know.
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	}
	n, err := flush.NewNotifier(flush.Self{
		Service: self.Name, ID: self.ID, Address: self.Address, Port: self.Port,
	}, secret, opts...)
	if err != nil {
		return nil, fmt.Errorf("fxmodule: flush notifier: %w", err)
	}
	return n, nil
}

// gatewayTargets returns the flush URLs of the gateways the Instancers
// list (flushURL: http://address:port followed by their registered flush
// path, the URL each gateway's handler accepts as its audience). It skips
// instances without a flush path, and self.
func gatewayTargets(gws []*sd.Instancer, self sd.Instance) []string {
	var urls []string
	for _, in := range gws {
		for _, g := range in.Instances() {
			u := flushURL(g)
			if u == "" || (g.Name == self.Name && g.ID == self.ID) {
				continue
			}
			urls = append(urls, u)
		}
	}
	return urls
}

func appendHooks(lc fx.Lifecycle, seq *sequence, s *settings, lp loggerParams) {
	log := lp.logger()
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			seq.server.Handler = seq.handler(seq.server.Handler)
			return seq.Start(ctx)
		},
		OnStop: func(ctx context.Context) error {
			// fx's stop deadline is the real stop timeout. Only when it
			// leaves less than the sequence's bounds add up to are steps
			// shortened or skipped; a deadline a little under the budget
			// (the time fx took to get here) is not short.
			if dl, ok := ctx.Deadline(); ok {
				if left, need := time.Until(dl), seq.StopTotal(); left < need {
					log.Warn("fx's stop deadline leaves less than the stop sequence's bounds; the flush and quiesce may be cut short or skipped (use fxmodule.StopTimeout to set fx's stop timeout and the budget)",
						"left", left.Round(time.Millisecond), "bounds", need, "budget", s.StopTimeout)
				}
			}
			return seq.Stop(ctx)
		},
	})
}

// StopTimeout sets fx's stop timeout and the module's stop budget
// (Config.StopTimeout) to d in one option: fx does not tell modules its
// stop timeout, and the stop sequence's bounds are checked against it.
func StopTimeout(d time.Duration) fx.Option {
	return fx.Options(
		fx.StopTimeout(d),
		fx.Decorate(func(c Config) Config {
			c.StopTimeout = d
			return c
		}),
	)
}
