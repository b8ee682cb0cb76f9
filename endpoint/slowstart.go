package endpoint

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gracekit/gracekit/internal/weighted"
)

// Defaults of [WithSlowStart], Envoy's: a linear ramp from 10%.
const (
	// DefaultSlowStartWindow is the window where gracekit turns slow start
	// on by default (fxmodule's Consumer and Gateway, grpcresolver's
	// balancer). In make demo a provider whose first seconds of calls are
	// slow (a cold cache or JIT) shows no latency spike after a restart
	// with a window twice its warm-up; 30 s covers warm-ups up to about
	// 15 s and holds a new instance below its full share for half a minute.
	DefaultSlowStartWindow = 30 * time.Second
	// DefaultSlowStartAggression makes the ramp linear.
	DefaultSlowStartAggression = 1.0
	// DefaultSlowStartMinWeight is the share a ramping instance starts at.
	DefaultSlowStartMinWeight = 0.1
)

// MetadataWeight is the metadata key whose value weighs an instance, as
// Dubbo and Nacos register it: a positive number, 1 when absent. An
// instance of weight 2 gets twice the picks of one of weight 1.
const MetadataWeight = "weight"

// Describer is implemented by an Instancer that knows, for each instance
// string it publishes, when the instance registered and its metadata
// ([github.com/gracekit/gracekit/sd.Instancer] does). The Endpointer asks
// it about every instance that joins its set, for [WithSlowStart] and
// [MetadataWeight]. Describe must not block; ok is false when the
// Instancer does not publish instance now; registered is zero when the
// node says nothing. The metadata map must not be modified.
type Describer interface {
	Describe(instance string) (registered time.Time, metadata map[string]string, ok bool)
}

// RegistrationDescriber is a [Describer] that also names the registration
// behind an instance string: its id and creation zxid
// ([github.com/gracekit/gracekit/sd.Instancer] is one). When several
// registrations publish one string (a provider restarted on the same
// address while its old node lives on), both methods answer for the
// newest. With [WithSlowStart], the Endpointer keys a ramp by the
// registration, not by the string: at each update, an instance whose
// registration changed is weighed again (metadata weight included), and
// ramps when the new registration is younger than the window. With a
// plain Describer, a new registration time tells a new registration.
// Registration must not block; ok is false when the Instancer does not
// publish instance now.
type RegistrationDescriber interface {
	Describer
	Registration(instance string) (id string, czxid int64, ok bool)
}

// SlowStart is a ramp, Envoy's slow start: an instance that joined
// Age ago weighs max(MinWeight, (Age/Window)^(1/Aggression)) of its full
// weight until Window has passed, then its full weight.
type SlowStart struct {
	Window     time.Duration
	Aggression float64
	MinWeight  float64
}

// Check says what is wrong with s, if anything: Window must be positive,
// Aggression a positive number, MinWeight in (0, 1].
func (s SlowStart) Check() error {
	switch {
	case s.Window <= 0:
		return fmt.Errorf("endpoint: slow start window %v is not positive (minimum is 1ns)", s.Window)
	case !(s.Aggression > 0) || math.IsInf(s.Aggression, 1):
		return fmt.Errorf("endpoint: slow start aggression %v out of range (above 0 and finite; 1 ramps linearly, above 1 faster early)", s.Aggression)
	case !(s.MinWeight > 0 && s.MinWeight <= 1):
		return fmt.Errorf("endpoint: slow start min weight %v out of range (above 0, at most 1)", s.MinWeight)
	}
	return nil
}

// Factor is the share of its full weight that an instance registered at
// registered has at now. A registration in the future (clock skew between
// hosts) counts as now.
func (s SlowStart) Factor(registered, now time.Time) float64 {
	age := now.Sub(registered)
	if age >= s.Window {
		return 1
	}
	if age <= 0 {
		return s.MinWeight
	}
	f := float64(age) / float64(s.Window)
	if s.Aggression != 1 {
		f = math.Pow(f, 1/s.Aggression)
	}
	return max(s.MinWeight, f)
}

// ParseWeight reads a [MetadataWeight] value: a positive, finite number.
// An empty value is weight 1.
func ParseWeight(v string) (float64, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 1, nil
	}
	w, err := strconv.ParseFloat(v, 64)
	if err != nil || !(w > 0) || math.IsInf(w, 1) {
		return 1, fmt.Errorf("endpoint: metadata %s=%q is not a positive number", MetadataWeight, v)
	}
	return w, nil
}

// WithSlowStart ramps in the instances that join the set after the first
// one the Endpointer got: each starts at minWeight of its full weight and
// grows to it over window, as [SlowStart] says, from its registration time
// when the Instancer is a [Describer] that knows it, else (or when that
// time is later, a clock ahead of ours) from when the Endpointer first saw
// it. One that registered more than window ago (an instance back from out
// of service) is not ramped; neither are those in the first set, as in
// Envoy. A ramp is keyed by the registration: a new one behind a string
// already in the set (a restart on the same address) ramps too, as
// [RegistrationDescriber] says. aggression 1 ([DefaultSlowStartAggression])
// is linear; minWeight is in (0, 1] ([DefaultSlowStartMinWeight]).
//
// The Endpointer recomputes the weights while an instance ramps, on a
// ticker of its own that Close stops; picks read them without allocating.
// A ramping instance that fails is ejected like any other.
func WithSlowStart(window time.Duration, aggression, minWeight float64) Option {
	return optionFunc(func(o *options) error {
		s := SlowStart{Window: window, Aggression: aggression, MinWeight: minWeight}
		if err := s.Check(); err != nil {
			return err
		}
		o.slowStart = &s
		return nil
	})
}

// withWallClock replaces the wall clock of slow start; tests only.
func withWallClock(now func() time.Time) Option {
	return optionFunc(func(o *options) error {
		o.wallNow = now
		return nil
	})
}

// rampTick is how often the weights are recomputed while an instance
// ramps: fifty steps a window, between 10 ms and 1 s.
func (s *SlowStart) rampTick() time.Duration {
	return min(max(s.Window/50, 10*time.Millisecond), time.Second)
}

// wallNow is the wall clock that ramps are measured by.
func (e *Endpointer) wallNow() time.Time {
	if e.opts.wallNow != nil {
		return e.opts.wallNow()
	}
	return time.Now()
}

// weigh sets in's weight from its metadata, the registration it stands
// for and, when it joins a set already loaded and slow start is on, when
// its ramp starts. e.mu must be held.
func (e *Endpointer) weigh(in *instance, joined bool) {
	in.weight, in.rampFrom, in.registered = 1, time.Time{}, time.Time{}
	if e.registrations != nil {
		in.regID, in.regCzxid, _ = e.registrations.Registration(in.name)
	}
	var registered time.Time
	if e.describer != nil {
		reg, md, ok := e.describer.Describe(in.name)
		if ok {
			registered, in.registered = reg, reg
			if v, has := md[MetadataWeight]; has {
				w, err := ParseWeight(v)
				if err != nil {
					e.opts.logger.Warn("ignoring the instance's weight", "instance", in.name, "err", err)
				}
				in.weight = w
			}
		}
	}
	s := e.opts.slowStart
	if s == nil || !joined {
		return
	}
	now := e.wallNow()
	if registered.IsZero() || registered.After(now) {
		registered = now // unknown, or a clock ahead of ours
	}
	if now.Sub(registered) < s.Window {
		in.rampFrom = registered
	}
}

// reregistered reports whether the registration behind in's string is no
// longer the one in was weighed for: a provider restarted on the same
// address, seen before (or without) its old node's end. e.mu must be held.
func (e *Endpointer) reregistered(in *instance) bool {
	switch {
	case e.registrations != nil:
		id, czxid, ok := e.registrations.Registration(in.name)
		return ok && (id != in.regID || czxid != in.regCzxid)
	case e.describer != nil: // no ids: a new registration time tells
		reg, _, ok := e.describer.Describe(in.name)
		return ok && !reg.Equal(in.registered)
	}
	return false
}

// weightsLocked is the pick table of ins (nil when their weights are all
// equal) and whether one of them still ramps. e.mu must be held.
func (e *Endpointer) weightsLocked(ins []*instance) (*weighted.Table, bool) {
	plain := true
	for _, in := range ins {
		if in.weight != 1 || !in.rampFrom.IsZero() {
			plain = false
			break
		}
	}
	if plain {
		return nil, false
	}
	now := e.wallNow()
	ramping := false
	ws := make([]float64, len(ins))
	for i, in := range ins {
		ws[i] = in.weight
		if in.rampFrom.IsZero() {
			continue
		}
		if f := e.opts.slowStart.Factor(in.rampFrom, now); f < 1 {
			ws[i] *= f
			ramping = true
		} else {
			in.rampFrom = time.Time{} // ramped up
		}
	}
	return weighted.New(ws), ramping
}

// reweigh publishes the current set again with its weights recomputed,
// and reports whether an instance still ramps.
func (e *Endpointer) reweigh() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	cur := e.snap.Load()
	s := *cur
	var ramping bool
	s.w, ramping = e.weightsLocked(s.instances)
	e.snap.Store(&s)
	return ramping
}

// WithoutSlowStart turns off a WithSlowStart given before it, such as a
// consumer's default: no instance is ramped. Metadata weights still hold.
func WithoutSlowStart() Option {
	return optionFunc(func(o *options) error {
		o.slowStart = nil
		return nil
	})
}
