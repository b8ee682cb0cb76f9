package endpoint

import (
	"context"
	"fmt"
	"math/bits"
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
// failing that s.instances[start]. s must not be empty. Sticky uses it (a
// key's next instance on the ring); the weighted balancers use spill.
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

// spill picks among the available instances that tried does not hold, in
// proportion to their weights, with r a uniform random number: the share
// of an instance that cannot be picked goes to the others as their weights
// say, not to its neighbour by name (which gave a ramping instance next to
// an ejected one more picks than a warm one). With none available it
// returns what choose does. It scans the set twice and does not allocate.
func spill(s *snapshot, start int, r uint64, tried *triedSet) *instance {
	var total uint64
	for i, in := range s.instances {
		if !tried.has(in) && in.available() {
			total += s.weight(i)
		}
	}
	if total == 0 {
		return choose(s, start, tried)
	}
	target, _ := bits.Mul64(r, total) // uniform in [0, total)
	var last *instance
	for i, in := range s.instances {
		if tried.has(in) || !in.available() {
			continue
		}
		w := s.weight(i)
		if target < w {
			return in
		}
		target -= w
		last = in
	}
	if last == nil { // every one became unavailable since the first scan
		return choose(s, start, tried)
	}
	return last // one came back since the first scan
}

// maxTurns bounds how many turns of the schedule a round-robin pick passes
// over unavailable instances before it spills.
const maxTurns = 8

func checkEndpointer(e *Endpointer) error {
	if e == nil {
		return fmt.Errorf("endpoint: endpointer is nil")
	}
	return nil
}

// RoundRobin picks instances in turn; an unavailable instance passes its
// turn on, so the others keep the proportions of their weights. Over any
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
	if n := uint64(len(s.instances)); n > 0 && s.w == nil {
		// The common case without a tried set; a turn that finds its
		// instance out is passed on by pick.
		if in := s.instances[(b.c.Add(1)-1)%n]; in.available() {
			return in.call, nil
		}
	}
	in, err := b.pick(context.Background(), triedSet{})
	if err != nil {
		return nil, err
	}
	return in.call, nil
}

// pick takes the next turn of the schedule. An instance that cannot be
// picked passes its turn on to the next one's: the others keep the
// proportions of their weights. After maxTurns such turns (most of the
// weight is out) it spills.
func (b *RoundRobin) pick(_ context.Context, tried triedSet) (*instance, error) {
	s := b.e.snap.Load()
	n := len(s.instances)
	if n == 0 {
		return nil, s.emptyErr()
	}
	var i int
	for range min(n, maxTurns) {
		if s.w != nil {
			i = s.w.Next(&b.c)
		} else {
			i = int((b.c.Add(1) - 1) % uint64(n))
		}
		if in := s.instances[i]; !tried.has(in) && in.available() {
			return in, nil
		}
	}
	return spill(s, i, rand.Uint64(), &tried), nil
}

// Random picks an available instance at random, in proportion to the
// weights of the available instances (uniformly when they are equal).
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
	if tried.has(in) || !in.available() {
		in = spill(s, i, rand.Uint64(), &tried)
	}
	return in, nil
}

// P2C is the power-of-two-choices least-loaded balancer: it draws two
// different instances at random, each in proportion to the weights, and
// picks the one with fewer calls in flight (through this Endpointer; the
// first drawn on a tie), preferring available ones; when neither is
// available it draws among the available ones by weight.
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
	return spill(s, i, rand.Uint64(), &tried), nil
}
