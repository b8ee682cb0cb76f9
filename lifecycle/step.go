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
	// StartTimeout bounds Start. Zero means DefaultStartTimeout.
	StartTimeout time.Duration
	// StopTimeout bounds Stop and counts toward the stop budget. Zero means
	// DefaultStopTimeout.
	StopTimeout time.Duration
	// Always runs Stop even when the context given to Engine.Stop has
	// already expired. Such a Stop always runs on a fresh context (keeping
	// the values of the stop context) bounded only by StopTimeout, so an
	// earlier step that used up the stop context cannot shorten it. Use it
	// for safety steps such as deregistering and closing a session.
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
