package endpoint

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitlb "github.com/go-kit/kit/sd/lb"
)

var (
	_ kitlb.Balancer = (*RoundRobin)(nil)
	_ kitlb.Balancer = (*Random)(nil)
	_ kitlb.Balancer = (*P2C)(nil)
	_ kitlb.Balancer = (*Sticky)(nil)
)

// picker is implemented by this package's balancers so that [NewRetry] can
// learn which instance it called and avoid it on the next attempt. tried is
// passed by value to keep it on the caller's stack.
type picker interface {
	pick(ctx context.Context, tried triedSet) (*instance, error)
}

// choose returns s.instances[start] if it is available and untried, else the
// next instance after it that is; failing that the first untried one, and
// failing that s.instances[start]. s must not be empty.
func choose(s *snapshot, start int, tried *triedSet) *instance {
	n := len(s.instances)
	var fallback *instance
	for k := 0; k < n; k++ {
		in := s.instances[(start+k)%n]
		if tried.has(in) {
			continue
		}
		if in.available() {
			return in
		}
		if fallback == nil {
			fallback = in
		}
	}
	if fallback != nil {
		return fallback
	}
	return s.instances[start%n]
}

func checkEndpointer(e *Endpointer) error {
	if e == nil {
		return fmt.Errorf("endpoint: endpointer is nil")
	}
	return nil
}

// RoundRobin picks instances in turn, skipping unavailable ones. Over any
// n·k consecutive picks of a stable set of n available instances of equal
// weight each is picked exactly k times, also under concurrent callers.
// With unequal weights ([MetadataWeight], [WithSlowStart]) it follows
// grpc-go's static stride scheduler: picks in proportion to the weights,
// spread evenly.
type RoundRobin struct {
	e *Endpointer
	c atomic.Uint64
}

// NewRoundRobin returns a round-robin balancer over e.
func NewRoundRobin(e *Endpointer) (*RoundRobin, error) {
	if err := checkEndpointer(e); err != nil {
		return nil, err
	}
	return &RoundRobin{e: e}, nil
}

// Endpoint implements go-kit's lb.Balancer. It does not allocate.
func (b *RoundRobin) Endpoint() (kitendpoint.Endpoint, error) {
	s := b.e.snap.Load()
	n := uint64(len(s.instances))
	if n == 0 {
		return nil, s.emptyErr()
	}
	if s.w != nil {
		return choose(s, s.w.Next(&b.c), &triedSet{}).call, nil
	}
	i := (b.c.Add(1) - 1) % n
	in := s.instances[i]
	if in.blockedUntil.Load() != 0 {
		in = choose(s, int(i), &triedSet{})
	}
	return in.call, nil
}

func (b *RoundRobin) pick(_ context.Context, tried triedSet) (*instance, error) {
	s := b.e.snap.Load()
	n := uint64(len(s.instances))
	if n == 0 {
		return nil, s.emptyErr()
	}
	if s.w != nil {
		return choose(s, s.w.Next(&b.c), &tried), nil
	}
	return choose(s, int((b.c.Add(1)-1)%n), &tried), nil
}

// Random picks an available instance at random, in proportion to the
// instances' weights (uniformly when they are equal).
type Random struct {
	e *Endpointer
}

// NewRandom returns a random balancer over e. It uses math/rand/v2's
// goroutine-safe global source.
func NewRandom(e *Endpointer) (*Random, error) {
	if err := checkEndpointer(e); err != nil {
		return nil, err
	}
	return &Random{e: e}, nil
}

// Endpoint implements go-kit's lb.Balancer. It does not allocate.
func (b *Random) Endpoint() (kitendpoint.Endpoint, error) {
	in, err := b.pick(context.Background(), triedSet{})
	if err != nil {
		return nil, err
	}
	return in.call, nil
}

func (b *Random) pick(_ context.Context, tried triedSet) (*instance, error) {
	s := b.e.snap.Load()
	n := len(s.instances)
	if n == 0 {
		return nil, s.emptyErr()
	}
	var i int
	if s.w == nil {
		i = rand.IntN(n)
	} else {
		i = s.w.Pick(rand.Uint64N(s.w.Total()))
	}
	in := s.instances[i]
	if in.blockedUntil.Load() != 0 || tried.has(in) {
		in = choose(s, i, &tried)
	}
	return in, nil
}

// P2C is the power-of-two-choices least-loaded balancer: it draws two
// different instances at random, each in proportion to the weights, and
// picks the one with fewer calls in flight (through this Endpointer; the
// first drawn on a tie), preferring available ones.
type P2C struct {
	e *Endpointer
}

// NewP2C returns a least-loaded power-of-two-choices balancer over e.
func NewP2C(e *Endpointer) (*P2C, error) {
	if err := checkEndpointer(e); err != nil {
		return nil, err
	}
	return &P2C{e: e}, nil
}

// Endpoint implements go-kit's lb.Balancer. It does not allocate.
func (b *P2C) Endpoint() (kitendpoint.Endpoint, error) {
	in, err := b.pick(context.Background(), triedSet{})
	if err != nil {
		return nil, err
	}
	return in.call, nil
}

func (b *P2C) pick(_ context.Context, tried triedSet) (*instance, error) {
	s := b.e.snap.Load()
	n := len(s.instances)
	switch n {
	case 0:
		return nil, s.emptyErr()
	case 1:
		return s.instances[0], nil
	}
	var i, j int
	if s.w == nil {
		i = rand.IntN(n)
		j = rand.IntN(n - 1)
		if j >= i {
			j++
		}
	} else {
		i = s.w.Pick(rand.Uint64N(s.w.Total()))
		j = s.w.PickOther(rand.Uint64N(s.w.Total()-uint64(s.w.Weight(i))), i)
	}
	a, c := s.instances[i], s.instances[j]
	aOK := a.available() && !tried.has(a)
	cOK := c.available() && !tried.has(c)
	switch {
	case aOK && cOK:
		if c.inflight() < a.inflight() {
			return c, nil
		}
		return a, nil
	case aOK:
		return a, nil
	case cOK:
		return c, nil
	}
	return choose(s, i, &tried), nil
}
