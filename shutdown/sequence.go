package shutdown

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gracekit/gracekit/lifecycle"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown/flush"
)

// Names of the Sequence's lifecycle steps, in start order. A step's stop
// undoes its start; steps without a start only act at stop.
//
//	step          start              stop
//	session       -                  close the ZooKeeper session (Always)
//	listen        listen             close the listener if not served
//	serve         serve (goroutine)  drain: Server.Shutdown, Tracker.Drain (Always)
//	quiesce       -                  wait for acks and a quiet window
//	ready-check   Config.ReadyCheck  -
//	flush         -                  Notifier.Flush
//	registration  register (UP)      deregister (Always)
//	status        -                  set OUT_OF_SERVICE
//	readiness     ready              unready, Tracker.StartDraining (Always)
//
// So the stop runs: readiness, status, registration, flush, quiesce, serve,
// listen, session. See lifecycle.Step.Always for what Always steps are
// given under a stop deadline.
const (
	StepSession      = "session"
	StepListen       = "listen"
	StepServe        = "serve"
	StepQuiesce      = "quiesce"
	StepReadyCheck   = "ready-check"
	StepFlush        = "flush"
	StepRegistration = "registration"
	StepStatus       = "status"
	StepReadiness    = "readiness"
)

// Default stop bounds of a Sequence. With these the stop steps add up to
// 14.4 s, inside lifecycle.DefaultStopBudget.
const (
	DefaultOutOfServiceTimeout = 2 * time.Second
	DefaultDeregisterTimeout   = 2 * time.Second
	DefaultFlushTimeout        = 3 * time.Second
	DefaultQuietWindow         = 250 * time.Millisecond
	DefaultMaxQuiesce          = 2 * time.Second
	DefaultDrainTimeout        = 4 * time.Second
	DefaultCloseTimeout        = time.Second
)

// maxCutReserve bounds the part of the drain's bound kept, after waiting
// for requests in flight, to close the connections left and see Serve
// return: a tenth of the bound, at most this.
const maxCutReserve = 100 * time.Millisecond

// idleConnGrace is how long the drain lets Shutdown close idle
// connections once no request is in flight, before it closes the rest.
const idleConnGrace = 100 * time.Millisecond

// quickTimeout bounds the stop steps that only flip state or close a
// listener.
const quickTimeout = 100 * time.Millisecond

// Server is what a Sequence serves and drains. *http.Server implements it;
// grpcstop.Server adapts a *grpc.Server.
type Server interface {
	// Serve serves on ln until Shutdown or Close, then returns nil or
	// http.ErrServerClosed.
	Serve(ln net.Listener) error
	// Shutdown stops accepting, lets the calls in flight finish and
	// returns, or returns ctx's error when ctx ends first.
	Shutdown(ctx context.Context) error
	// Close cuts every connection at once.
	Close() error
}

// Served is a server a Sequence serves besides Config.Server.
type Served struct {
	Server Server
	// Listener is the one Server serves; nil listens on Addr.
	Listener net.Listener
	// Addr is the TCP address to listen on when Listener is nil.
	Addr string
}

// Config is what a Sequence drives. Zero durations take the defaults.
type Config struct {
	// Registration registers this instance: an *sd.Registrar. Required.
	Registration Registration
	// Tracker counts this instance's requests; the server's handler must be
	// wrapped with its Middleware (or endpoints with EndpointMiddleware).
	// Required.
	Tracker *Tracker
	// Readiness backs /readyz; nil uses a private one.
	Readiness *Readiness
	// Notifier flushes gateways at stop; nil skips the flush.
	Notifier *flush.Notifier

	// Server serves the instance: an *http.Server, or a gRPC server through
	// grpcstop.Server. nil runs no listen and serve steps.
	Server Server
	// Listener is the one Server serves; nil listens on Addr.
	Listener net.Listener
	// Addr is the TCP address to listen on when Listener is nil; empty
	// uses Server.Addr.
	Addr string
	// More are servers served beside Server, as one instance: a gRPC
	// server next to an HTTP one, each on its own port. They are listened
	// on, served and drained with it. They need a Server.
	More []Served

	// ReadyCheck, if set, must pass before registration.
	ReadyCheck func(ctx context.Context) error
	// CloseSession, if set, closes the ZooKeeper session, last.
	CloseSession func(ctx context.Context) error

	// StartTimeout bounds each start step; zero is
	// lifecycle.DefaultStartTimeout. The start context's deadline, less a
	// margin, bounds each step too (see lifecycle.Engine.Start): a
	// registration conflict is returned before the caller gives up.
	StartTimeout        time.Duration
	OutOfServiceTimeout time.Duration
	DeregisterTimeout   time.Duration
	FlushTimeout        time.Duration
	// QuietWindow is how long no request may arrive before the quiesce
	// ends, counted from its start at the earliest.
	QuietWindow time.Duration
	// MaxQuiesce bounds the quiesce, which reaches it when a target did not
	// ack or requests keep arriving.
	MaxQuiesce time.Duration
	// DrainTimeout bounds the drain: the wait for requests in flight, then
	// closing the connections of those that did not finish (counted in
	// Report.CutByDrain and returned as a *DrainError).
	DrainTimeout time.Duration
	CloseTimeout time.Duration
}

// StepReport is the outcome of one stop step.
type StepReport struct {
	Step     string
	Duration time.Duration
	Skipped  bool
	Err      error
}

// Report tells how a stop went.
type Report struct {
	// Duration is the whole stop.
	Duration time.Duration
	// Steps are the stop steps, in the order they ran.
	Steps []StepReport
	// Flush has one report per flush target.
	Flush []flush.Report
	// Quiesced is true when the quiesce ended on its condition (all acked
	// and a quiet window), false when it reached MaxQuiesce or did not run.
	Quiesced bool
	// AfterDeregistration counts requests that arrived after deregistering.
	AfterDeregistration int64
	// InFlightAtDrain is the number of requests in flight when the drain
	// began.
	InFlightAtDrain int
	// CutByDrain is the number of requests still in flight when the
	// drain's bound ended: the drain closed their connections, so their
	// clients got no response. Stop's error then includes a *DrainError.
	CutByDrain int
	// Err is what Stop returned.
	Err error
}

// DrainError says that requests were still in flight when the drain's
// bound ended, and were cut: with a Server, their connections were
// closed. Stop's error includes it; errors.As finds it.
type DrainError struct {
	// Cut is the number of requests cut.
	Cut int
	// Bound is how long the drain had: Config.DrainTimeout, or less when
	// the stop deadline was nearer.
	Bound time.Duration
	// DrainTimeout is Config.DrainTimeout.
	DrainTimeout time.Duration
	// Err is the drain context's error.
	Err error
}

func (e *DrainError) Error() string {
	return fmt.Sprintf("shutdown: drain: %d request(s) cut: still in flight at the end of the drain's bound of %s (DrainTimeout %s): %v",
		e.Cut, e.Bound.Round(time.Millisecond), e.DrainTimeout, e.Err)
}

// Unwrap returns the drain context's error.
func (e *DrainError) Unwrap() error { return e.Err }

// Sequence is a provider's start and stop, as lifecycle steps.
type Sequence struct {
	cfg    Config
	engine *lifecycle.Engine

	registered atomic.Bool
	served     []Served       // Server first, then More
	lns        []net.Listener // one per served, once listened
	serving    bool
	serveDone  chan struct{} // closed when every Serve returned
	serveErrs  []error

	mu     sync.Mutex
	report Report
}

// NewSequence checks cfg and returns its Sequence. opts are passed to
// lifecycle.New: lifecycle.StopBudget to fit another budget than fx's
// default, lifecycle.WithListener to observe the steps. It returns a
// *lifecycle.BudgetError if the stop bounds do not fit the budget.
func NewSequence(cfg Config, opts ...lifecycle.Option) (*Sequence, error) {
	if cfg.Registration == nil {
		return nil, errors.New("shutdown: config needs a Registration")
	}
	if cfg.Tracker == nil {
		return nil, errors.New("shutdown: config needs a Tracker")
	}
	if hs, ok := cfg.Server.(*http.Server); ok && hs == nil {
		cfg.Server = nil // a nil *http.Server: no server, as documented
	}
	if len(cfg.More) > 0 && cfg.Server == nil {
		return nil, errors.New("shutdown: Config.More needs a Config.Server")
	}
	for i, m := range cfg.More {
		if m.Server == nil {
			return nil, fmt.Errorf("shutdown: Config.More[%d] has no Server", i)
		}
	}
	if cfg.Readiness == nil {
		cfg.Readiness = &Readiness{}
	}
	for _, d := range []struct {
		name string
		p    *time.Duration
		def  time.Duration
	}{
		{"StartTimeout", &cfg.StartTimeout, lifecycle.DefaultStartTimeout},
		{"OutOfServiceTimeout", &cfg.OutOfServiceTimeout, DefaultOutOfServiceTimeout},
		{"DeregisterTimeout", &cfg.DeregisterTimeout, DefaultDeregisterTimeout},
		{"FlushTimeout", &cfg.FlushTimeout, DefaultFlushTimeout},
		{"QuietWindow", &cfg.QuietWindow, DefaultQuietWindow},
		{"MaxQuiesce", &cfg.MaxQuiesce, DefaultMaxQuiesce},
		{"DrainTimeout", &cfg.DrainTimeout, DefaultDrainTimeout},
		{"CloseTimeout", &cfg.CloseTimeout, DefaultCloseTimeout},
	} {
		switch {
		case *d.p < 0:
			return nil, fmt.Errorf("shutdown: invalid %s %s (must not be negative)", d.name, *d.p)
		case *d.p == 0:
			*d.p = d.def
		}
	}
	if cfg.QuietWindow > cfg.MaxQuiesce {
		return nil, fmt.Errorf("shutdown: QuietWindow %s exceeds MaxQuiesce %s", cfg.QuietWindow, cfg.MaxQuiesce)
	}
	s := &Sequence{cfg: cfg}
	if cfg.Server != nil {
		s.served = append([]Served{{Server: cfg.Server, Listener: cfg.Listener, Addr: cfg.Addr}}, cfg.More...)
	}
	e, err := lifecycle.New(s.steps(), append([]lifecycle.Option{lifecycle.WithListener(s.record)}, opts...)...)
	if err != nil {
		return nil, err
	}
	s.engine = e
	return s, nil
}

func (s *Sequence) steps() []lifecycle.Step {
	c := s.cfg
	var steps []lifecycle.Step
	if c.CloseSession != nil {
		steps = append(steps, lifecycle.Step{Name: StepSession, Stop: c.CloseSession, StopTimeout: c.CloseTimeout, Always: true})
	}
	if c.Server != nil {
		steps = append(steps,
			lifecycle.Step{Name: StepListen, Start: s.listen, Stop: s.closeListener, StartTimeout: c.StartTimeout, StopTimeout: quickTimeout},
			// Always: an expired stop context must not leave the server
			// and its goroutine running; the drain keeps its own bound.
			lifecycle.Step{Name: StepServe, Start: s.serve, Stop: s.drain, StartTimeout: c.StartTimeout, StopTimeout: c.DrainTimeout, Always: true},
		)
	} else {
		steps = append(steps, lifecycle.Step{Name: StepServe, Stop: s.drain, StopTimeout: c.DrainTimeout, Always: true})
	}
	steps = append(steps, lifecycle.Step{Name: StepQuiesce, Stop: s.quiesce, StopTimeout: c.MaxQuiesce + quickTimeout})
	if c.ReadyCheck != nil {
		steps = append(steps, lifecycle.Step{Name: StepReadyCheck, Start: c.ReadyCheck, StartTimeout: c.StartTimeout})
	}
	if c.Notifier != nil {
		steps = append(steps, lifecycle.Step{Name: StepFlush, Stop: s.flush, StopTimeout: c.FlushTimeout})
	}
	return append(steps,
		lifecycle.Step{Name: StepRegistration, Start: s.register, Stop: s.deregister, StartTimeout: c.StartTimeout, StopTimeout: c.DeregisterTimeout, Always: true},
		lifecycle.Step{Name: StepStatus, Stop: s.outOfService, StopTimeout: c.OutOfServiceTimeout},
		// Always: flipping a flag costs nothing, and the probe must say
		// "stopping" whatever the stop context.
		lifecycle.Step{Name: StepReadiness, Start: s.ready, Stop: s.unready, StartTimeout: c.StartTimeout, StopTimeout: quickTimeout, Always: true},
	)
}

// Start listens, serves in a goroutine the Sequence owns, runs the ready
// check, registers and marks the instance ready. On failure it undoes what
// started and returns the error. It may be called once.
func (s *Sequence) Start(ctx context.Context) error { return s.engine.Start(ctx) }

// Stop marks the instance unready, out of service, deregisters it, flushes
// the gateways, quiesces, drains and closes the session, each step bounded,
// and returns the steps' errors joined. Requests cut by the drain are
// counted in the Report and make the error include a *DrainError.
//
// The unready, deregister, drain and close steps run even after a failed
// or timed-out step. When ctx has a deadline, their bounds are taken from
// it (see lifecycle.Engine.Stop): they all run and Stop returns before the
// deadline, the drain, deregister and close sharing the time left in
// proportion to their timeouts when it is short, while the out-of-service,
// flush and quiesce steps get only the time beyond their reserve, or are
// skipped. When ctx is already done, those four still run, with their own
// timeouts, and the others are skipped. When Stop returns, the serve
// goroutine has exited unless the drain ran out of time on a Server that
// ignores Close. Stop is idempotent.
func (s *Sequence) Stop(ctx context.Context) error {
	begin := time.Now()
	err := s.engine.Stop(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.report.Duration == 0 {
		s.report.Duration = time.Since(begin)
		s.report.AfterDeregistration = s.cfg.Tracker.AfterDeregistration()
		s.report.Err = err
	}
	return err
}

// StopTotal returns the sum of the stop steps' timeouts: the stop deadline
// under which no step is shortened.
func (s *Sequence) StopTotal() time.Duration { return s.engine.StopTotal() }

// Report returns what the last stop did; call it after Stop.
func (s *Sequence) Report() Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.report
	r.Steps = append([]StepReport(nil), r.Steps...)
	r.Flush = append([]flush.Report(nil), r.Flush...)
	return r
}

// Addr returns the address served, once the listen step ran; nil before.
func (s *Sequence) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lns) == 0 {
		return nil
	}
	return s.lns[0].Addr()
}

// Readiness returns the readiness state the Sequence drives.
func (s *Sequence) Readiness() *Readiness { return s.cfg.Readiness }

func (s *Sequence) record(e lifecycle.Event) {
	if e.Phase != lifecycle.PhaseStop {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.report.Steps = append(s.report.Steps, StepReport{Step: e.Step, Duration: e.Duration, Skipped: e.Skipped, Err: e.Err})
}

// Served reports whether the serve step ran: the servers were handed
// their listeners, so a stop, or the rollback of a failed Start, shut them
// down, and net/http and grpc-go servers never serve again after that.
func (s *Sequence) Served() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.serving
}

// Addrs returns the addresses served, Server's first, once the listen
// step ran; nil before.
func (s *Sequence) Addrs() []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []net.Addr
	for _, ln := range s.lns {
		out = append(out, ln.Addr())
	}
	return out
}

func (s *Sequence) listen(ctx context.Context) error {
	var lns []net.Listener
	for i, sv := range s.served {
		ln := sv.Listener
		if ln == nil {
			addr := sv.Addr
			if hs, ok := sv.Server.(*http.Server); ok && addr == "" && i == 0 {
				addr = hs.Addr
			}
			var lc net.ListenConfig
			var err error
			if ln, err = lc.Listen(ctx, "tcp", addr); err != nil {
				for _, l := range lns {
					_ = l.Close() // this step failed: its stop will not run
				}
				return fmt.Errorf("shutdown: listen: %w", err)
			}
		}
		lns = append(lns, ln)
	}
	s.mu.Lock()
	s.lns = lns
	s.mu.Unlock()
	return nil
}

func (s *Sequence) closeListener(context.Context) error {
	if s.serving {
		return nil // the drain closed them
	}
	var errs []error
	for _, ln := range s.lns {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Sequence) serve(context.Context) error {
	s.mu.Lock()
	s.serving = true
	s.mu.Unlock()
	s.serveDone = make(chan struct{})
	s.serveErrs = make([]error, len(s.served))
	var wg sync.WaitGroup
	for i, sv := range s.served {
		wg.Go(func() {
			if err := sv.Server.Serve(s.lns[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.serveErrs[i] = err
			}
		})
	}
	go func() {
		wg.Wait()
		close(s.serveDone)
	}()
	return nil
}

// servers is what the drain shuts down: Server, or Server and More as
// one, in parallel.
func (s *Sequence) servers() Server {
	if len(s.served) <= 1 {
		return s.cfg.Server
	}
	g := make(serverGroup, len(s.served))
	for i, sv := range s.served {
		g[i] = sv.Server
	}
	return g
}

// serverGroup shuts down and closes servers in parallel.
type serverGroup []Server

func (g serverGroup) Serve(net.Listener) error {
	return errors.New("shutdown: a server group is served by the Sequence")
}

func (g serverGroup) Shutdown(ctx context.Context) error {
	errs := make([]error, len(g))
	var wg sync.WaitGroup
	for i, srv := range g {
		wg.Go(func() { errs[i] = srv.Shutdown(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (g serverGroup) Close() error {
	var errs []error
	for _, srv := range g {
		errs = append(errs, srv.Close())
	}
	return errors.Join(errs...)
}

func (s *Sequence) register(ctx context.Context) error {
	if err := s.cfg.Registration.RegisterContext(ctx); err != nil {
		return err
	}
	s.registered.Store(true)
	return nil
}

func (s *Sequence) ready(context.Context) error {
	s.cfg.Readiness.SetReady()
	return nil
}

func (s *Sequence) unready(context.Context) error {
	s.cfg.Readiness.SetUnready()
	s.cfg.Tracker.StartDraining()
	return nil
}

func (s *Sequence) outOfService(ctx context.Context) error {
	return s.cfg.Registration.SetStatus(ctx, sd.StatusOutOfService)
}

func (s *Sequence) deregister(ctx context.Context) error {
	defer s.cfg.Tracker.MarkDeregistered()
	return s.cfg.Registration.DeregisterContext(ctx)
}

// acked reports whether every flush target acked; true without a Notifier.
func (s *Sequence) acked() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.report.Flush {
		if !r.Acked {
			return false
		}
	}
	return true
}

func (s *Sequence) flush(ctx context.Context) error {
	if !s.registered.Load() {
		return nil
	}
	if r, ok := s.cfg.Registration.(registeredReporter); ok && !r.Registered() {
		return nil
	}
	reports, err := s.cfg.Notifier.Flush(ctx)
	s.mu.Lock()
	s.report.Flush = reports
	s.mu.Unlock()
	return err
}

// quiesce keeps serving until every flush target acked and no request
// arrived for QuietWindow, counted from the later of the last arrival and
// the quiesce start; or until MaxQuiesce. It waits on timers, re-armed when
// a request arrived meanwhile.
func (s *Sequence) quiesce(ctx context.Context) error {
	inject(fpStopAfterFlush)
	if !s.registered.Load() {
		return nil
	}
	begin := time.Now()
	limit := time.NewTimer(s.cfg.MaxQuiesce)
	defer limit.Stop()
	if !s.acked() {
		select {
		case <-limit.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	quiet := time.NewTimer(s.cfg.QuietWindow)
	defer quiet.Stop()
	for {
		select {
		case <-limit.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-quiet.C:
			since := s.cfg.Tracker.LastArrival()
			if since.Before(begin) {
				since = begin
			}
			if left := s.cfg.QuietWindow - time.Since(since); left > 0 {
				quiet.Reset(left)
				continue
			}
			s.mu.Lock()
			s.report.Quiesced = true
			s.mu.Unlock()
			return nil
		}
	}
}

// drain waits for the requests in flight, bounded by ctx less a reserve
// for cutting what is left: it closes the server's connections and counts
// the requests still in flight as cut.
func (s *Sequence) drain(ctx context.Context) error {
	begin := time.Now()
	bound := s.cfg.DrainTimeout
	wait := ctx // for the requests in flight
	if dl, ok := ctx.Deadline(); ok {
		bound = dl.Sub(begin)
		var cancel context.CancelFunc
		wait, cancel = context.WithDeadline(ctx, dl.Add(-min(bound/10, maxCutReserve)))
		defer cancel()
	}
	s.mu.Lock()
	s.report.InFlightAtDrain = s.cfg.Tracker.InFlight()
	s.mu.Unlock()
	var (
		errs   []error
		cut    int
		waited error // wait's error when it ended with requests in flight
	)
	if srv := s.servers(); srv != nil {
		sctx, cancel := context.WithCancel(wait)
		defer cancel()
		shut := make(chan error, 1)
		go func() { shut <- srv.Shutdown(sctx) }()
		// Once nothing is in flight, Shutdown may still wait for
		// connections that never sent a request (a client's spare dial):
		// Go counts those idle only after 5 s. Give it a moment, then cut
		// them, unless a request started meanwhile.
		drained := s.cfg.Tracker.Drain(wait)
		for drained == nil {
			t := time.NewTimer(idleConnGrace)
			select {
			case err := <-shut:
				shut <- err
			case <-t.C:
			}
			t.Stop()
			if len(shut) > 0 || s.cfg.Tracker.InFlight() == 0 {
				cancel()
				break
			}
			drained = s.cfg.Tracker.Drain(wait)
		}
		if err := <-shut; err != nil {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				errs = append(errs, fmt.Errorf("shutdown: server shutdown: %w", err))
			}
			if drained != nil {
				waited = drained
				cut = s.cfg.Tracker.InFlight() // counted before their connections go
			}
			_ = srv.Close() // cut the connections still open
		}
	} else if err := s.cfg.Tracker.Drain(wait); err != nil {
		waited, cut = err, s.cfg.Tracker.InFlight()
	}
	if cut > 0 {
		s.mu.Lock()
		s.report.CutByDrain = cut
		s.mu.Unlock()
		errs = append(errs, &DrainError{Cut: cut, Bound: bound, DrainTimeout: s.cfg.DrainTimeout, Err: waited})
	}
	if s.serveDone != nil {
		// Serve returns promptly after Shutdown or Close; the reserve
		// left in ctx is for this wait.
		select {
		case <-s.serveDone:
		case <-ctx.Done():
		}
		select {
		case <-s.serveDone:
			for _, err := range s.serveErrs {
				if err != nil {
					errs = append(errs, fmt.Errorf("shutdown: serve: %w", err))
				}
			}
		default:
			errs = append(errs, fmt.Errorf("shutdown: serve goroutine did not exit within the drain's bound of %s", bound.Round(time.Millisecond)))
		}
	}
	return errors.Join(errs...)
}
