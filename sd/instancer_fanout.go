package sd

import (
	"slices"

	kitsd "github.com/go-kit/kit/sd"

	"github.com/gracekit/gracekit/internal/proptrace"
)

// This file is the Instancer's fan-out: each registered channel has a
// goroutine of its own that sends it the newest set, so a slow subscriber
// holds up nobody but itself. The bound: a subscriber has at most one send
// under way; sets published meanwhile are not queued, the next send carries
// the newest one (and its error). Each event carries a copy of the set,
// which the subscriber may keep or change.

type subscriber struct {
	ch     chan<- kitsd.Event
	wake   chan struct{} // a newer set may be there
	cancel chan struct{} // closed by Deregister
	done   chan struct{} // closed when the goroutine ends
	sent   uint64        // version last delivered; owned by the goroutine
}

// Register implements sd.Instancer: once the first load is done, ch
// receives the current set before Register returns (as go-kit's own
// Instancers do), then the complete set on every change, from a goroutine
// of its own; it never blocks the Instancer or other subscribers.
func (in *Instancer) Register(ch chan<- kitsd.Event) {
	s := &subscriber{ch: ch, wake: make(chan struct{}, 1), cancel: make(chan struct{}), done: make(chan struct{})}
	in.mu.Lock()
	if old, ok := in.subs[ch]; ok { // registered twice: the newer one serves
		delete(in.subs, ch)
		close(old.cancel)
		defer func() { <-old.done }()
	}
	if in.ctx.Err() != nil {
		in.mu.Unlock()
		return
	}
	var ev kitsd.Event
	first := in.firstDone
	if first {
		ev, s.sent = in.eventLocked(), in.version
	}
	in.subs[ch] = s
	in.wg.Add(1)
	in.mu.Unlock()
	if first {
		select {
		case ch <- ev:
		case <-s.cancel:
		case <-in.ctx.Done():
		}
	}
	go in.serve(s)
	s.poke()
}

// eventLocked is the current event, with a copy of the set. in.mu must be held.
// A fallback's set goes without the error (NewInstancerFallback): go-kit's
// subscribers would not use it otherwise.
func (in *Instancer) eventLocked() kitsd.Event {
	if in.staleLocked() {
		return kitsd.Event{Instances: slices.Clone(in.pub)}
	}
	return kitsd.Event{Instances: slices.Clone(in.pub), Err: in.pubErr}
}

func (s *subscriber) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// serve sends s the newest set whenever it changed, until Deregister or Stop.
func (in *Instancer) serve(s *subscriber) {
	defer in.wg.Done()
	defer close(s.done)
	for {
		select {
		case <-s.wake:
		case <-s.cancel:
			return
		case <-in.ctx.Done():
			return
		}
		in.mu.Lock()
		if !in.firstDone || s.sent >= in.version {
			in.mu.Unlock()
			continue
		}
		ev, version := in.eventLocked(), in.version
		in.mu.Unlock()
		proptrace.Mark(proptrace.Deliver)
		select {
		case s.ch <- ev:
			s.sent = version
		case <-s.cancel:
			return
		case <-in.ctx.Done():
			return
		}
	}
}

// Deregister implements sd.Instancer. Once it returns nothing more is sent
// on ch, so the caller may close it. It waits only for ch's own goroutine.
func (in *Instancer) Deregister(ch chan<- kitsd.Event) {
	in.mu.Lock()
	s, ok := in.subs[ch]
	if ok {
		delete(in.subs, ch)
		close(s.cancel)
	}
	in.mu.Unlock()
	if ok {
		<-s.done
	}
}

// bump records a new set and wakes every subscriber. in.mu must be held.
func (in *Instancer) bump() {
	in.version++
	in.publishes.Add(1)
	proptrace.Mark(proptrace.Publish)
	for _, s := range in.subs {
		s.poke()
	}
}
