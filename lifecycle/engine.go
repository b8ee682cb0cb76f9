package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Engine starts and stops an ordered list of steps. Its methods are safe for
// concurrent use; Start and Stop never overlap: a Stop called during Start
// waits for Start to return, then stops what started.
type Engine struct {
	steps     []Step
	listeners []Listener

	mu      sync.Mutex // held for the whole of Start and Stop
	state   state
	started int // steps[:started] have started
	stopErr error
}

type state int

const (
	stateNew state = iota
	stateStarted
	stateStopped
)

// New returns an Engine for steps, which it copies. It fails if a step has
// no name or a duplicate one, a timeout is negative, or the stop timeouts
// add up to more than the stop budget (a *BudgetError).
func New(steps []Step, opts ...Option) (*Engine, error) {
	o := options{budget: DefaultStopBudget}
	for _, opt := range opts {
		if err := opt.apply(&o); err != nil {
			return nil, err
		}
	}
	seen := make(map[string]bool, len(steps))
	var (
		bounds []StepBound
		sum    time.Duration
	)
	for i, s := range steps {
		switch {
		case s.Name == "":
			return nil, fmt.Errorf("lifecycle: step %d has no name", i)
		case seen[s.Name]:
			return nil, fmt.Errorf("lifecycle: duplicate step name %q", s.Name)
		case s.StartTimeout < 0:
			return nil, fmt.Errorf("lifecycle: step %q: invalid start timeout %s (must not be negative)", s.Name, s.StartTimeout)
		case s.StopTimeout < 0:
			return nil, fmt.Errorf("lifecycle: step %q: invalid stop timeout %s (must not be negative)", s.Name, s.StopTimeout)
		}
		seen[s.Name] = true
		if s.Stop != nil {
			bounds = append(bounds, StepBound{Step: s.Name, Timeout: s.stopTimeout()})
			sum += s.stopTimeout()
		}
	}
	if sum > o.budget {
		// Name the steps in the order they stop.
		for i, j := 0, len(bounds)-1; i < j; i, j = i+1, j-1 {
			bounds[i], bounds[j] = bounds[j], bounds[i]
		}
		return nil, &BudgetError{Steps: bounds, Sum: sum, Budget: o.budget}
	}
	return &Engine{steps: append([]Step(nil), steps...), listeners: o.listeners}, nil
}

// Start runs the steps' Start in order, each with its own timeout derived
// from ctx. At the first error, or if ctx is done before a step, it stops the
// steps that started, in reverse (each with its stop timeout, not bound by
// ctx), and returns a *StepError for the failing step joined with any stop
// errors. Start may be called once; later calls return ErrStarted, or
// ErrStopped after Stop.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch e.state {
	case stateStarted:
		return ErrStarted
	case stateStopped:
		return ErrStopped
	}
	e.state = stateStarted
	for i, s := range e.steps {
		if err := ctx.Err(); err != nil {
			serr := &StepError{Step: s.Name, Phase: PhaseStart, Err: err}
			e.emit(Event{Step: s.Name, Phase: PhaseStart, Begin: time.Now(), Err: serr})
			return e.rollback(ctx, serr)
		}
		if s.Start != nil {
			begin := time.Now()
			sctx, cancel := context.WithTimeout(ctx, s.startTimeout())
			err := s.Start(sctx)
			cancel()
			if err != nil {
				serr := &StepError{Step: s.Name, Phase: PhaseStart, Err: err}
				e.emit(Event{Step: s.Name, Phase: PhaseStart, Begin: begin, Duration: time.Since(begin), Err: serr})
				return e.rollback(ctx, serr)
			}
			e.emit(Event{Step: s.Name, Phase: PhaseStart, Begin: begin, Duration: time.Since(begin)})
		}
		e.started = i + 1
	}
	return nil
}

func (e *Engine) rollback(ctx context.Context, cause error) error {
	err := e.stop(context.WithoutCancel(ctx), true)
	e.state = stateStopped
	e.stopErr = err
	return errors.Join(cause, err)
}

// Stop runs the Stop of every step that started, in reverse order, each with
// its own timeout derived from ctx. It keeps going past errors and returns
// them joined, each a *StepError. Once ctx is done, the remaining steps are
// skipped (their error wraps ErrSkipped) except those marked Always, which
// run on a fresh context with their own timeout.
//
// Stop before Start returns nil. Stop is idempotent: later calls wait for the
// first to finish and return its result. After a failed Start, the steps
// were already stopped and Stop returns the rollback's error.
func (e *Engine) Stop(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch e.state {
	case stateNew:
		e.state = stateStopped
		return nil
	case stateStopped:
		return e.stopErr
	}
	e.state = stateStopped
	e.stopErr = e.stop(ctx, false)
	return e.stopErr
}

func (e *Engine) stop(ctx context.Context, rollback bool) error {
	var errs []error
	for i := e.started - 1; i >= 0; i-- {
		s := e.steps[i]
		if s.Stop == nil {
			continue
		}
		begin := time.Now()
		var sctx context.Context
		var cancel context.CancelFunc
		switch {
		case s.Always:
			sctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), s.stopTimeout())
		case ctx.Err() != nil:
			serr := &StepError{Step: s.Name, Phase: PhaseStop, Err: fmt.Errorf("%w: %w", ErrSkipped, ctx.Err())}
			errs = append(errs, serr)
			e.emit(Event{Step: s.Name, Phase: PhaseStop, Rollback: rollback, Begin: begin, Skipped: true, Err: serr})
			continue
		default:
			sctx, cancel = context.WithTimeout(ctx, s.stopTimeout())
		}
		err := s.Stop(sctx)
		cancel()
		ev := Event{Step: s.Name, Phase: PhaseStop, Rollback: rollback, Begin: begin, Duration: time.Since(begin)}
		if err != nil {
			serr := &StepError{Step: s.Name, Phase: PhaseStop, Err: err}
			errs = append(errs, serr)
			ev.Err = serr
		}
		e.emit(ev)
	}
	e.started = 0
	return errors.Join(errs...)
}

func (e *Engine) emit(ev Event) {
	for _, l := range e.listeners {
		l(ev)
	}
}
