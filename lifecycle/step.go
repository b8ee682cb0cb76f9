package lifecycle

import (
	"context"
	"time"
)

// Default step timeouts, used when a Step leaves its timeout at zero.
const (
	DefaultStartTimeout = 15 * time.Second
	DefaultStopTimeout  = time.Second
)

// Step is one unit of start and stop work, like an fx.Hook with timeouts.
//
// Start and Stop must honor their context: the engine gives each call a
// context with the step's timeout and waits for the call to return. Either
// may be nil; a step with a nil Start counts as started once reached, so its
// Stop runs at stop time.
type Step struct {
	// Name identifies the step in events and errors. Names must be unique and
	// non-empty.
	Name string
	// Start runs at start, in step order.
	Start func(ctx context.Context) error
	// Stop runs at stop, in reverse step order, if the step started.
	Stop func(ctx context.Context) error
	// StartTimeout bounds Start. Zero means DefaultStartTimeout. The bound
	// also ends a margin before the start context's deadline.
	StartTimeout time.Duration
	// StopTimeout bounds Stop and counts toward the stop budget. Zero means
	// DefaultStopTimeout.
	StopTimeout time.Duration
	// Always runs Stop even when an earlier stop step failed or the context
	// given to Engine.Stop is done, and reserves its time: while the stop
	// context's deadline is ahead, the steps that are not Always only get
	// what is left after the Always steps still to run, and a deadline
	// shorter than the Always steps' timeouts shares the time left among
	// them in proportion to their timeouts, so that they all run before it.
	// Once the stop context is done, an Always step runs with its full
	// StopTimeout. Its Stop runs on a context that keeps the stop context's
	// values but not its cancellation. Use it for safety steps such as
	// marking the instance unready, deregistering, draining and closing a
	// session.
	Always bool
}

func (s Step) startTimeout() time.Duration {
	if s.StartTimeout == 0 {
		return DefaultStartTimeout
	}
	return s.StartTimeout
}

func (s Step) stopTimeout() time.Duration {
	if s.StopTimeout == 0 {
		return DefaultStopTimeout
	}
	return s.StopTimeout
}
