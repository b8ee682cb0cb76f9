package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-kit/kit/metrics"

	"github.com/gracekit/gracekit/sd"
)

// Health check defaults.
const (
	DefaultHealthInterval = 5 * time.Second
	DefaultHealthFailures = 3
	DefaultHealthPasses   = 2
	DefaultHealthHold     = 10 * time.Second
)

// HealthCheck takes a running instance out of rotation while it knows it
// is sick, without stopping it: after Failures failed checks in a row,
// /readyz answers 503, the gRPC health service NOT_SERVING, the node's
// status turns OUT_OF_SERVICE with sd.MetadataOutBy "health" (data
// watchers drop it; gracekit ls says "by health") and the gateways are
// flushed (their caches drop it at once). After Passes passed checks in a
// row it is UP again everywhere (gateways see the node written again and
// take it back). Two transitions are at least Hold apart: an instance
// changes its status at most once per Hold, however its check alternates.
// Once the stop began the check no longer runs, and the instance never
// returns to UP.
type HealthCheck struct {
	// Check returns nil when the instance can serve. nil disables health
	// checking. It gets a ctx bounded by Timeout. A Check still running at
	// its Timeout counts as failed, and so does every interval until it
	// returns: no other Check starts meanwhile (a hung dependency costs
	// one goroutine). Stop never waits for a Check in progress.
	Check func(ctx context.Context) error
	// Interval between checks; zero is DefaultHealthInterval.
	Interval time.Duration
	// Timeout of one check; zero is Interval.
	Timeout time.Duration
	// Failures in a row that take the instance out; zero is
	// DefaultHealthFailures.
	Failures int
	// Passes in a row that bring it back; zero is DefaultHealthPasses.
	Passes int
	// Hold is the least time between two transitions; zero is
	// DefaultHealthHold.
	Hold time.Duration
}

// HealthTransition is one change of an instance's health verdict, its
// health check's or an operator's (gracekit drain and undrain). It is
// recorded when the verdict is decided, with the readiness it sets, and
// completed (Done) once the node's status is written and, leaving
// rotation, the gateways flushed.
type HealthTransition struct {
	// At is when the verdict was decided: the readiness changed then.
	At      time.Time
	Healthy bool
	// By is who made the change: ByHealth or ByOperator. While an operator
	// holds the instance out, a passing health check is recorded but the
	// instance stays out until undrained.
	By string
	// Err is the check's last error when it turned unhealthy, and, once
	// Done, what failed in carrying the verdict out (status, flush), if
	// anything.
	Err error
	// Done is when carrying the verdict out ended (status written,
	// gateways flushed, each within its bound); zero while under way.
	Done time.Time
}

func (h HealthCheck) withDefaults() (HealthCheck, error) {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Interval", h.Interval}, {"Timeout", h.Timeout}, {"Hold", h.Hold}} {
		if d.v < 0 {
			return h, fmt.Errorf("provider: invalid HealthCheck.%s %s (must not be negative)", d.name, d.v)
		}
	}
	if h.Failures < 0 || h.Passes < 0 {
		return h, fmt.Errorf("provider: invalid HealthCheck thresholds %d failures, %d passes (must not be negative)", h.Failures, h.Passes)
	}
	if h.Interval == 0 {
		h.Interval = DefaultHealthInterval
	}
	if h.Timeout == 0 {
		h.Timeout = h.Interval
	}
	if h.Failures == 0 {
		h.Failures = DefaultHealthFailures
	}
	if h.Passes == 0 {
		h.Passes = DefaultHealthPasses
	}
	if h.Hold == 0 {
		h.Hold = DefaultHealthHold
	}
	return h, nil
}

// WithHealthCounter counts health transitions, with label "to" = "healthy"
// or "unhealthy".
func WithHealthCounter(c metrics.Counter) Option {
	return optionFunc(func(o *options) error { o.healthCounter = c; return nil })
}

// healthLoop runs the HealthCheck of one started provider; its stop, which
// the provider's Stop calls first, cancels it and waits for it.
type healthLoop struct {
	p      *Provider
	cancel context.CancelFunc
	done   chan struct{}
}

func (p *Provider) startHealth() {
	if p.cfg.Health.Check == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &healthLoop{p: p, cancel: cancel, done: make(chan struct{})}
	p.mu.Lock()
	p.health = h
	p.mu.Unlock()
	go h.run(ctx)
}

// stopHealth stops the health loop and waits for it, within ctx. The
// loop never waits on a Check in progress, so this is prompt however the
// Check behaves, and the stop keeps its whole budget.
func (p *Provider) stopHealth(ctx context.Context) error {
	p.mu.Lock()
	h := p.health
	p.mu.Unlock()
	if h == nil {
		return nil
	}
	h.cancel()
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("provider: the health check did not end before the stop's deadline: %w", ctx.Err())
	}
}

// Health returns the transitions so far, the health check's and an
// operator's, oldest first.
func (p *Provider) Health() []HealthTransition {
	v := &p.verdict
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]HealthTransition(nil), v.transitions...)
}

func (h *healthLoop) run(ctx context.Context) {
	defer close(h.done)
	hc := h.p.cfg.Health
	t := time.NewTicker(hc.Interval)
	defer t.Stop()
	var (
		healthy        = true
		fails, passes  int
		lastTransition time.Time
		lastErr        error
		// hung is the result of a Check still running past its Timeout,
		// nil while none is: a hung dependency holds one goroutine, and
		// every tick until it returns counts as failed.
		hung  chan error
		since time.Time
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		if hung != nil {
			select {
			case <-hung:
				hung = nil // returned at last: its verdict is stale, check anew
			default:
				err = fmt.Errorf("provider: the health check started at %s is still running past its Timeout %s (a Check that ignores its ctx?)", since.Format(time.RFC3339Nano), hc.Timeout)
			}
		}
		if hung == nil {
			var started time.Time
			hung, started, err = h.check(ctx, hc)
			if hung != nil {
				since = started
			}
		}
		if ctx.Err() != nil {
			return // stopping: a check cut by the stop says nothing
		}
		if err != nil {
			fails, passes, lastErr = fails+1, 0, err
		} else {
			fails, passes = 0, passes+1
		}
		held := !lastTransition.IsZero() && time.Since(lastTransition) < hc.Hold
		switch {
		case held:
		case healthy && fails >= hc.Failures:
			healthy, lastTransition = false, time.Now()
			h.record(ctx, false, lastErr)
		case !healthy && passes >= hc.Passes:
			healthy, lastTransition = true, time.Now()
			h.record(ctx, true, nil)
		}
	}
}

// check runs one Check in its own goroutine and waits for it until its
// Timeout or the stop, whichever comes first. A Check still running then
// is failed; its result arrives later on hung, which is buffered so that
// the goroutine ends whenever the Check does, waited for or not.
func (h *healthLoop) check(ctx context.Context, hc HealthCheck) (hung chan error, started time.Time, err error) {
	started = time.Now()
	res := make(chan error, 1)
	cctx, cancel := context.WithTimeout(ctx, hc.Timeout)
	go func() {
		defer cancel()
		res <- hc.Check(cctx)
	}()
	timer := time.NewTimer(hc.Timeout)
	defer timer.Stop()
	select {
	case err := <-res:
		return nil, started, err
	case <-timer.C:
	case <-ctx.Done():
	}
	// On a loaded machine the timer and the result can both be ready when
	// this goroutine runs again, and select picks either: a Check that
	// returned is not still running, whatever the order.
	select {
	case err := <-res:
		return nil, started, err
	default:
	}
	return res, started, fmt.Errorf("provider: the health check did not return within its Timeout %s (a Check that ignores its ctx?)", hc.Timeout)
}

// record carries a verdict out: readiness and its HealthTransition at
// once, then the node's status and, leaving rotation, a flush of the
// gateways (up to two Intervals each); then it logs, counts and completes
// the transition. Recorded only after those, Health() showed nothing for
// an instance already unready.
func (h *healthLoop) record(ctx context.Context, healthy bool, cause error) {
	p := h.p
	i := p.setSick(!healthy, cause)
	status, by, to := sd.StatusOutOfService, ByHealth, "unhealthy"
	if healthy {
		status, by, to = sd.StatusUp, "", "healthy"
	}
	bound := 2 * p.cfg.Health.Interval
	errs := []error{cause}
	if reg := p.Registrar(); reg != nil {
		sctx, cancel := context.WithTimeout(ctx, bound)
		errs = append(errs, reg.SetStatusBy(sctx, status, by)) // the node says who: out_by=health
		cancel()
	}
	if !healthy && p.notify != nil {
		fctx, cancel := context.WithTimeout(ctx, bound)
		_, err := p.notify.Flush(fctx)
		cancel()
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	if healthy {
		p.log.Info("health: back in rotation", "status", status, "err", err)
	} else {
		p.log.Warn("health: out of rotation", "status", status, "err", err)
	}
	if c := p.opts.healthCounter; c != nil {
		c.With("to", to).Add(1)
	}
	p.verdict.done(i, err)
}
