// Package proptrace marks the stages a deregistration goes through from
// the watch session's socket to an Endpointer's set, for the bench's
// -prop-stages table (bench/propagation.go). Nothing but the bench sets a
// hook: off, a mark is one atomic load and a branch, with no allocation,
// no lock and no clock read.
package proptrace

import "sync/atomic"

// Stage is a point on the way from the socket to the Endpointer.
type Stage uint8

const (
	// Wire: a notification's frame was read off the watch session's
	// connection (internal/zkwire's read goroutine).
	Wire Stage = iota
	// Feed: the Instancer's goroutine took the notification's work from
	// its feed (sd, recursive watch mode).
	Feed
	// Publish: the Instancer published a new set.
	Publish
	// Deliver: the Instancer's fan-out goroutine hands the set to a
	// subscriber's channel.
	Deliver
	// Endpointer: an Endpointer stored the snapshot built from a set.
	Endpointer
	// Stages counts the stages.
	Stages
)

var names = [Stages]string{"wire", "feed", "publish", "deliver", "endpointer"}

func (s Stage) String() string {
	if s < Stages {
		return names[s]
	}
	return "stage?"
}

var hook atomic.Pointer[func(Stage)]

// SetHook makes every later Mark call h (nil: none). h runs on the
// goroutine of the stage and must be quick and must not block.
func SetHook(h func(Stage)) {
	if h == nil {
		hook.Store(nil)
		return
	}
	hook.Store(&h)
}

// Mark notes that stage s was reached.
func Mark(s Stage) {
	if h := hook.Load(); h != nil {
		(*h)(s)
	}
}
