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

	stopTotal time.Duration // the sum of the stop timeouts

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
	return &Engine{steps: append([]Step(nil), steps...), listeners: o.listeners, stopTotal: sum}, nil
}

// StopTotal returns the sum of the steps' stop timeouts: how long a stop
// may take when no step is shortened. New checked that it fits the stop
// budget. A Stop whose ctx leaves less than this may shorten or skip steps.
func (e *Engine) StopTotal() time.Duration { return e.stopTotal }

// Margins kept between a step's bound and the caller's deadline, so that
// the caller gets the result before it gives up: a tenth of the time left,
// at most maxStartMargin at start (the rollback of a failed start must fit
// in it too) and maxStopMargin at stop.
const (
	maxStartMargin = time.Second
	maxStopMargin  = 250 * time.Millisecond
)

// margin returns a tenth of left, at most limit; zero if left is not
// positive.
func margin(left, limit time.Duration) time.Duration {
	if left <= 0 {
		return 0
	}
	return min(left/10, limit)
}

// Start runs the steps' Start in order, each bounded by its own timeout.
// When ctx has a deadline, each step's bound also ends a margin before it
// (a tenth of the time left, at most 1 s), so that a step that waits for
// something, such as a registration held by another instance, returns its
// own error while the caller is still waiting for it, rather than the
// caller's deadline error. At the first error, or if ctx is done before a
// step, it stops the steps that started, in reverse (each with its stop
// timeout, not bound by ctx), and returns a *StepError for the failing step
// joined with any stop errors. Start may be called once; later calls return
// ErrStarted, or ErrStopped after Stop.
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
			bound := s.startTimeout()
			if dl, ok := ctx.Deadline(); ok {
				left := dl.Sub(begin)
				bound = min(bound, left-margin(left, maxStartMargin))
			}
			sctx, cancel := context.WithTimeout(ctx, bound)
			err := s.Start(sctx)
			cancel()
			if err != nil {
				serr := &StepError{Step: s.Name, Phase: PhaseStart, Err: err}
				e.emit(Event{Step: s.Name, Phase: PhaseStart, Begin: begin, Bound: bound, Duration: time.Since(begin), Err: serr})
				return e.rollback(ctx, serr)
			}
			e.emit(Event{Step: s.Name, Phase: PhaseStart, Begin: begin, Bound: bound, Duration: time.Since(begin)})
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

// Stop runs the Stop of every step that started, in reverse order, and
// returns their errors joined, each a *StepError. It keeps going past
// errors. Each step gets a context bounded by its StopTimeout, shortened as
// follows when ctx has a deadline, so that Stop returns before it (a margin
// of a tenth of the time left, at most 250 ms, is kept for the caller):
//
//   - The Always steps still to run have their time reserved. When the
//     deadline leaves less than their timeouts add up to, each Always step
//     gets a share of the time left in proportion to its timeout.
//   - Every other step gets at most the time left after that reservation,
//     and is skipped (its error wraps ErrSkipped) when nothing is left.
//
// So with a deadline in the future, every Always step runs and Stop returns
// before the deadline, as long as the steps honor their contexts; under a
// short deadline the Always steps run with shorter bounds and other steps
// are skipped. Once ctx is done (an expired deadline, or a cancel), the
// remaining steps are skipped except the Always ones, which then run with
// their own full timeouts: a caller that stopped waiting, as fx does at its
// stop timeout, may not see them finish. Always steps run on a context that
// keeps ctx's values but not its cancellation.
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
	deadline, hasDeadline := ctx.Deadline()
	if hasDeadline {
		deadline = deadline.Add(-margin(time.Until(deadline), maxStopMargin))
	}
	// reserved is the sum of the timeouts of the Always steps still to
	// stop after the current one.
	var reserved time.Duration
	for i := e.started - 1; i >= 0; i-- {
		if s := e.steps[i]; s.Stop != nil && s.Always {
			reserved += s.stopTimeout()
		}
	}
	var errs []error
	for i := e.started - 1; i >= 0; i-- {
		s := e.steps[i]
		if s.Stop == nil {
			continue
		}
		bound := s.stopTimeout()
		if s.Always {
			reserved -= bound
		}
		begin := time.Now()
		left := deadline.Sub(begin)
		var skip error
		switch {
		case s.Always:
			if hasDeadline && left > 0 && left < bound+reserved {
				bound = time.Duration(float64(left) * float64(bound) / float64(bound+reserved))
			}
		case ctx.Err() != nil:
			skip = fmt.Errorf("%w: %w", ErrSkipped, ctx.Err())
		case hasDeadline && left-reserved <= 0:
			skip = fmt.Errorf("%w: the %s left before the stop deadline is reserved for the steps that always run (%s): %w",
				ErrSkipped, max(left, 0).Round(time.Millisecond), reserved, context.DeadlineExceeded)
		case hasDeadline:
			bound = min(bound, left-reserved)
		}
		if skip != nil {
			serr := &StepError{Step: s.Name, Phase: PhaseStop, Err: skip}
			errs = append(errs, serr)
			e.emit(Event{Step: s.Name, Phase: PhaseStop, Rollback: rollback, Begin: begin, Skipped: true, Err: serr})
			continue
		}
		parent := ctx
		if s.Always {
			parent = context.WithoutCancel(ctx)
		}
		sctx, cancel := context.WithTimeout(parent, bound)
		err := s.Stop(sctx)
		cancel()
		ev := Event{Step: s.Name, Phase: PhaseStop, Rollback: rollback, Begin: begin, Bound: bound, Duration: time.Since(begin)}
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
