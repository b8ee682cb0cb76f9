package endpoint

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
)

// ClosingReporter is implemented by the io.Closer that a Factory returns when
// its endpoint can see the closing signal ([ClosingHeader]). The Endpointer
// asks Closing after every call on the instance; once it reports true the
// instance is no longer picked. Closing must be cheap and must not block.
// [HTTPFactory]'s closers implement it.
type ClosingReporter interface {
	Closing() bool
}

// refs layout: the low bits count calls in flight; removedBit says the
// instance left the set; closedBit says its Closer ran (or is running).
const (
	closedBit  = int64(1) << 61
	removedBit = int64(1) << 62
	countMask  = closedBit - 1
)

// instance is one member of the set with its endpoint and health.
type instance struct {
	name     string
	ep       kitendpoint.Endpoint
	closer   io.Closer
	reporter ClosingReporter
	owner    *Endpointer
	call     kitendpoint.Endpoint // ep wrapped with accounting; built once

	// Guarded by owner.mu: the weight from metadata, when slow start ramps
	// the instance from (zero: it has its full weight), and the
	// registration they were taken from (its id and czxid from a
	// RegistrationDescriber, its time from a Describer).
	weight     float64
	rampFrom   time.Time
	regID      string
	regCzxid   int64
	registered time.Time

	refs atomic.Int64
	// blockedUntil is 0 while the instance may be picked, else the clock
	// value (see Endpointer.now) at which it may be picked again.
	blockedUntil atomic.Int64
	fails        atomic.Int32 // consecutive connect failures
	ejections    atomic.Int32 // consecutive ejections, for the growing cool-off
}

func newInstance(owner *Endpointer, name string, ep kitendpoint.Endpoint, closer io.Closer) *instance {
	in := &instance{name: name, ep: ep, closer: closer, owner: owner, weight: 1}
	if r, ok := closer.(ClosingReporter); ok {
		in.reporter = r
	}
	in.call = in.invoke
	return in
}

// invoke calls the instance's endpoint, counting it in flight so that the
// Closer waits for it, and feeds the outcome to the ejection logic.
func (in *instance) invoke(ctx context.Context, request any) (any, error) {
	if in.refs.Add(1)&closedBit != 0 {
		in.release()
		return nil, ErrRemoved
	}
	defer in.release()
	response, err := in.ep(ctx, request)
	in.observe(err)
	return response, err
}

func (in *instance) inflight() int64 { return in.refs.Load() & countMask }

func (in *instance) release() {
	if in.refs.Add(-1) == removedBit && in.refs.CompareAndSwap(removedBit, removedBit|closedBit) {
		in.close()
	}
}

// remove takes the instance out of service: its Closer runs now if no call is
// in flight, else when the last one returns.
func (in *instance) remove() {
	for {
		v := in.refs.Load()
		if v&removedBit != 0 {
			return
		}
		next := v | removedBit
		if v&countMask == 0 {
			next |= closedBit
		}
		if in.refs.CompareAndSwap(v, next) {
			if next&closedBit != 0 {
				in.close()
			}
			return
		}
	}
}

func (in *instance) close() {
	if in.closer == nil {
		return
	}
	if err := in.closer.Close(); err != nil {
		in.owner.opts.logger.Warn("close instance", "instance", in.name, "err", err)
	}
}

// available reports whether the instance may be picked, re-admitting it when
// its cool-off or closing hold has passed.
func (in *instance) available() bool {
	until := in.blockedUntil.Load()
	if until == 0 {
		return true
	}
	if in.owner.now() < until {
		return false
	}
	in.blockedUntil.CompareAndSwap(until, 0)
	return true
}

// observe updates closing and ejection state after a call.
func (in *instance) observe(err error) {
	if in.reporter != nil && in.blockedUntil.Load() == 0 && in.reporter.Closing() {
		in.markClosing()
	}
	e := in.owner
	if err == nil || e.opts.ejectAfter == 0 {
		if in.fails.Load() != 0 {
			in.fails.Store(0)
		}
		if err == nil && in.ejections.Load() != 0 && in.blockedUntil.Load() == 0 {
			in.ejections.Store(0)
		}
		return
	}
	if errors.Is(err, ErrRemoved) || e.opts.classify(err) != NotSent {
		if in.fails.Load() != 0 {
			in.fails.Store(0)
		}
		return
	}
	if int(in.fails.Add(1)) >= e.opts.ejectAfter {
		e.eject(in)
	}
}

// markClosing keeps the instance unpicked for the closing hold.
func (in *instance) markClosing() {
	e := in.owner
	until := e.now() + int64(e.opts.closingHold)
	for {
		cur := in.blockedUntil.Load()
		if cur >= until {
			return
		}
		if in.blockedUntil.CompareAndSwap(cur, until) {
			break
		}
	}
	e.countEjection(EjectClosing)
	e.opts.logger.Info("instance closing", "instance", in.name)
}

// triedSet holds the instances a call already tried. It is passed by value
// so that it stays on the caller's stack.
type triedSet struct {
	a [8]*instance
	n int
}

func (t *triedSet) add(in *instance) {
	if in != nil && t.n < len(t.a) {
		t.a[t.n] = in
		t.n++
	}
}

func (t *triedSet) has(in *instance) bool {
	for i := 0; i < t.n; i++ {
		if t.a[i] == in {
			return true
		}
	}
	return false
}
