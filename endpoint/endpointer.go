package endpoint

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitsd "github.com/go-kit/kit/sd"
	kitlb "github.com/go-kit/kit/sd/lb"

	"github.com/gracekit/gracekit/internal/proptrace"
	"github.com/gracekit/gracekit/internal/weighted"
)

// ErrClosed is returned by the endpoints and balancers of a closed
// [Endpointer].
var ErrClosed = errors.New("endpoint: endpointer closed")

var _ kitsd.Endpointer = (*Endpointer)(nil)

// snapshot is one immutable view of the instance set; readers load it
// atomically and never lock.
type snapshot struct {
	instances []*instance // sorted by name
	endpoints []kitendpoint.Endpoint
	err       error           // set when the set was invalidated or closed
	w         *weighted.Table // the instances' weights; nil when all are equal
	owner     *Endpointer     // says why the set is empty
}

// weight is instance i's weight in the pick table: 1 when all are equal.
func (s *snapshot) weight(i int) uint64 {
	if s.w == nil {
		return 1
	}
	return uint64(s.w.Weight(i))
}

// emptyErr is a balancer's error when s has no instance: s.err, or a
// *NoEndpointsError that says why.
func (s *snapshot) emptyErr() error {
	if s.err != nil {
		return s.err
	}
	if s.owner == nil {
		return kitlb.ErrNoEndpoints
	}
	return s.owner.noEndpoints()
}

// Endpointer subscribes to an Instancer and keeps one endpoint per instance,
// built by a Factory. It implements go-kit's sd.Endpointer and is the source
// of this package's balancers. All methods are safe for concurrent use.
type Endpointer struct {
	src           kitsd.Instancer
	describer     Describer             // src, when it describes its instances
	registrations RegistrationDescriber // src, when it names their registrations
	counter       InstanceCounter       // src, when it counts its service's instances
	factory       kitsd.Factory
	opts          options
	epoch         time.Time

	snap atomic.Pointer[snapshot]

	events chan kitsd.Event
	sync   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	ramp   chan struct{} // an instance ramps: the loop recomputes weights until none does
	once   sync.Once

	mu         sync.Mutex // guards below and snapshot publication
	current    map[string]*instance
	tombstones map[string]time.Time // evicted instance → end of its hold
	tombTimer  *time.Timer          // ends the earliest hold
	listed     []string             // the Instancer's latest set, sorted
	loaded     bool                 // a set was applied: later instances join (slow start)
	closed     bool

	ejectMu sync.Mutex // serializes ejection decisions
}

// NewEndpointer subscribes to src and builds an endpoint per instance with f.
// The first set that src sends while registering is applied before
// NewEndpointer returns. Factory errors are logged and the instance skipped.
//
// On a discovery error the last endpoints are kept, unless
// [InvalidateOnError] says otherwise. A removed instance is no longer picked
// at once; its io.Closer runs after the calls in flight on it have returned.
// Call Close to stop.
func NewEndpointer(src kitsd.Instancer, f kitsd.Factory, opts ...Option) (*Endpointer, error) {
	if src == nil {
		return nil, fmt.Errorf("endpoint: instancer is nil")
	}
	if f == nil {
		return nil, fmt.Errorf("endpoint: factory is nil")
	}
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt.apply(&o); err != nil {
			return nil, err
		}
	}
	e := &Endpointer{
		src:        src,
		factory:    f,
		opts:       o,
		epoch:      time.Now(),
		events:     make(chan kitsd.Event),
		sync:       make(chan struct{}),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
		ramp:       make(chan struct{}, 1),
		current:    map[string]*instance{},
		tombstones: map[string]time.Time{},
	}
	e.describer, _ = src.(Describer)
	e.registrations, _ = src.(RegistrationDescriber)
	e.counter, _ = src.(InstanceCounter)
	e.snap.Store(&snapshot{owner: e})
	go e.loop()
	src.Register(e.events)
	e.sync <- struct{}{} // every event received before this one is applied
	return e, nil
}

// now returns the clock used for cool-offs: monotonic nanoseconds, > 0.
func (e *Endpointer) now() int64 {
	if e.opts.now != nil {
		return e.opts.now()
	}
	return int64(time.Since(e.epoch)) + 1
}

func (e *Endpointer) loop() {
	defer close(e.done)
	var (
		timer   *time.Timer
		expired <-chan time.Time
		ticker  *time.Ticker // while an instance ramps
		tick    <-chan time.Time
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if ticker != nil {
			ticker.Stop()
		}
	}()
	for {
		select {
		case ev := <-e.events:
			if ev.Err == nil {
				if timer != nil {
					timer.Stop()
					timer, expired = nil, nil
				}
				e.update(ev.Instances)
				continue
			}
			e.opts.logger.Warn("discovery error", "err", ev.Err)
			if e.opts.invalidate && timer == nil {
				timer = time.NewTimer(e.opts.invalidateTimeout)
				expired = timer.C
			}
		case <-expired:
			timer, expired = nil, nil
			e.invalidate()
		case <-e.ramp:
			if ticker == nil {
				ticker = time.NewTicker(e.opts.slowStart.rampTick())
				tick = ticker.C
			}
		case <-tick:
			if !e.reweigh() {
				ticker.Stop()
				ticker, tick = nil, nil
			}
		case <-e.sync:
		case <-e.stop:
			return
		}
	}
}

// Endpoints implements go-kit's sd.Endpointer: the current endpoints, ordered
// by instance string. It includes ejected and closing instances, which this
// package's balancers skip. The slice must not be modified.
func (e *Endpointer) Endpoints() ([]kitendpoint.Endpoint, error) {
	s := e.snap.Load()
	return s.endpoints, s.err
}

// Instances returns the instance strings currently in the set, sorted.
func (e *Endpointer) Instances() []string {
	s := e.snap.Load()
	out := make([]string, len(s.instances))
	for i, in := range s.instances {
		out[i] = in.name
	}
	return out
}

// Evict removes instance (the string the Instancer publishes) now: when Evict
// returns, no balancer over this Endpointer picks it. Calls in flight on it
// finish before its io.Closer runs. It stays out, even if the Instancer still
// lists it, until an Instancer update no longer lists it, or for the
// [EvictionHold] at most; after either it may come back. An instance the
// Instancer's latest set does not list is already out and leaves no
// tombstone: no later update would lift it, and a provider restarting on the
// same address must come back. Evicting an evicted instance again does not
// extend its hold.
func (e *Endpointer) Evict(instance string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	if _, listed := slices.BinarySearch(e.listed, instance); !listed {
		return
	}
	if _, dead := e.tombstones[instance]; !dead {
		e.tombstones[instance] = time.Now().Add(e.opts.evictionHold)
		e.armTombTimerLocked()
	}
	if in, ok := e.current[instance]; ok {
		delete(e.current, instance)
		e.publish(e.snap.Load().err)
		in.remove()
		e.countEjection(EjectEvicted)
		e.opts.logger.Info("instance evicted", "instance", instance)
	}
}

// Close deregisters from the Instancer, stops the Endpointer's goroutine and
// waits for it, then removes every instance (each io.Closer runs once the
// calls in flight on it return). Afterwards the balancers return [ErrClosed].
// Close may be called more than once; it always returns nil.
func (e *Endpointer) Close() error {
	e.once.Do(func() {
		e.src.Deregister(e.events) // the loop still receives meanwhile
		close(e.stop)
		<-e.done
		e.mu.Lock()
		defer e.mu.Unlock()
		e.closed = true
		if e.tombTimer != nil {
			e.tombTimer.Stop()
		}
		old := e.current
		e.current = map[string]*instance{}
		e.publish(ErrClosed)
		for _, in := range old {
			in.remove()
		}
	})
	return nil
}

// update applies a complete instance set from the Instancer.
func (e *Endpointer) update(listed []string) {
	names := slices.Clone(listed)
	slices.Sort(names)
	names = slices.Compact(names)

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.listed = names
	joined := e.loaded // instances new to a later set join: they ramp
	e.loaded = true
	now := time.Now()
	for name, until := range e.tombstones {
		if _, found := slices.BinarySearch(names, name); !found || !now.Before(until) {
			delete(e.tombstones, name)
		}
	}
	e.armTombTimerLocked()
	next := make(map[string]*instance, len(names))
	for _, name := range names {
		if _, dead := e.tombstones[name]; dead {
			continue
		}
		if in, ok := e.current[name]; ok {
			if joined && e.opts.slowStart != nil && e.reregistered(in) {
				e.weigh(in, true) // a new registration behind the string: its own ramp
			}
			next[name] = in
			delete(e.current, name)
			continue
		}
		ep, closer, err := e.factory(name)
		if err != nil {
			e.opts.logger.Warn("factory failed", "instance", name, "err", err)
			continue
		}
		if ep == nil {
			e.opts.logger.Warn("factory returned a nil endpoint", "instance", name)
			continue
		}
		in := newInstance(e, name, ep, closer)
		e.weigh(in, joined)
		next[name] = in
	}
	old := e.current
	e.current = next
	e.publish(nil)
	proptrace.Mark(proptrace.Endpointer)
	for _, in := range old {
		in.remove()
	}
}

// armTombTimerLocked sets the timer that ends the earliest eviction hold,
// so that an evicted instance discovery still lists comes back without
// waiting for an unrelated update; e.mu must be held.
func (e *Endpointer) armTombTimerLocked() {
	var next time.Time
	for _, until := range e.tombstones {
		if next.IsZero() || until.Before(next) {
			next = until
		}
	}
	switch {
	case next.IsZero():
		if e.tombTimer != nil {
			e.tombTimer.Stop()
		}
	case e.tombTimer == nil:
		e.tombTimer = time.AfterFunc(time.Until(next), e.endHolds)
	default:
		e.tombTimer.Reset(time.Until(next))
	}
}

// endHolds brings back the evicted instances whose hold ended and that
// discovery still lists, unless the set was invalidated or closed.
func (e *Endpointer) endHolds() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	now := time.Now()
	var back []string
	for name, until := range e.tombstones {
		if !now.Before(until) {
			delete(e.tombstones, name)
			back = append(back, name)
		}
	}
	e.armTombTimerLocked()
	err := e.snap.Load().err
	if len(back) == 0 || err != nil {
		return // an invalidated set comes back with the next good update
	}
	added := false
	for _, name := range back {
		if _, listed := slices.BinarySearch(e.listed, name); !listed {
			continue
		}
		if _, ok := e.current[name]; ok {
			continue
		}
		ep, closer, ferr := e.factory(name)
		if ferr != nil || ep == nil {
			e.opts.logger.Warn("factory failed", "instance", name, "err", ferr)
			continue
		}
		in := newInstance(e, name, ep, closer)
		e.weigh(in, true)
		e.current[name] = in
		added = true
		e.opts.logger.Info("eviction hold ended; instance back", "instance", name)
	}
	if added {
		e.publish(nil)
	}
}

// invalidate removes every instance after a discovery error outlived the
// InvalidateOnError timeout.
func (e *Endpointer) invalidate() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	old := e.current
	e.current = map[string]*instance{}
	e.publish(errInvalidated)
	for _, in := range old {
		in.remove()
	}
}

var errInvalidated = errors.New("endpoint: discovery error outlived the invalidate timeout")

// publish stores a new snapshot built from e.current; e.mu must be held.
func (e *Endpointer) publish(err error) {
	s := &snapshot{err: err, owner: e}
	s.instances = make([]*instance, 0, len(e.current))
	for _, in := range e.current {
		s.instances = append(s.instances, in)
	}
	slices.SortFunc(s.instances, func(a, b *instance) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	s.endpoints = make([]kitendpoint.Endpoint, len(s.instances))
	for i, in := range s.instances {
		s.endpoints[i] = in.call
	}
	var ramping bool
	s.w, ramping = e.weightsLocked(s.instances)
	e.snap.Store(s)
	if ramping {
		select {
		case e.ramp <- struct{}{}:
		default:
		}
	}
}

// eject takes in out of rotation for a cool-off unless too many instances
// are unavailable already.
func (e *Endpointer) eject(in *instance) {
	e.ejectMu.Lock()
	defer e.ejectMu.Unlock()
	if !in.available() {
		return // already out
	}
	s := e.snap.Load()
	n := len(s.instances)
	limit := int(e.opts.maxEjectedShare * float64(n))
	if limit > n-1 {
		limit = n - 1
	}
	out := 0
	for _, other := range s.instances {
		if other != in && !other.available() {
			out++
		}
	}
	if out >= limit {
		return
	}
	k := in.ejections.Add(1) - 1
	cool := e.opts.coolOff
	for ; k > 0 && cool < e.opts.maxCoolOff; k-- {
		cool *= 2
	}
	cool = min(cool, e.opts.maxCoolOff)
	in.blockedUntil.Store(e.now() + int64(cool))
	in.fails.Store(0)
	e.countEjection(EjectConnectFailures)
	e.opts.logger.Warn("instance ejected", "instance", in.name, "cool_off", cool)
}
