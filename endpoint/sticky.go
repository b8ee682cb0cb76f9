package endpoint

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	kitendpoint "github.com/go-kit/kit/endpoint"
)

// DefaultStickyReplicas is the number of points each instance gets on the
// [Sticky] hash ring.
const DefaultStickyReplicas = 100

// StickyOption configures [NewSticky].
type StickyOption interface {
	applySticky(*stickyOptions) error
}

type stickyOptionFunc func(*stickyOptions) error

func (f stickyOptionFunc) applySticky(o *stickyOptions) error { return f(o) }

type stickyOptions struct {
	key      func(context.Context) string
	replicas int
}

// StickyKeyFunc sets how [Sticky] reads a request's key from its context.
// The default is [StickyKey]. f must not be nil and must not block.
func StickyKeyFunc(f func(ctx context.Context) string) StickyOption {
	return stickyOptionFunc(func(o *stickyOptions) error {
		if f == nil {
			return fmt.Errorf("endpoint: sticky key func is nil")
		}
		o.key = f
		return nil
	})
}

// StickyReplicas sets the number of ring points per instance (default
// [DefaultStickyReplicas]); more points spread keys more evenly. n must be
// between 1 and 10000.
func StickyReplicas(n int) StickyOption {
	return stickyOptionFunc(func(o *stickyOptions) error {
		if n < 1 || n > 10000 {
			return fmt.Errorf("endpoint: sticky replicas %d out of range (1 to 10000)", n)
		}
		o.replicas = n
		return nil
	})
}

// Sticky sends the calls that carry the same key (see [WithStickyKey]) to
// the same instance, by consistent hashing: when an instance joins or leaves,
// only the keys that hash to it move. When the key's instance is unavailable
// the call goes to the next available instance on the ring; a call without a
// key is balanced round robin. The hash (FNV-1a) is the same in every
// process, so gateways agree on the placement.
//
// go-kit's lb.Balancer has no context, so Endpoint returns a dispatching
// endpoint that picks per call from the call's context.
type Sticky struct {
	e        *Endpointer
	opts     stickyOptions
	ring     atomic.Pointer[ring]
	mu       sync.Mutex // serializes ring builds
	rr       atomic.Uint64
	dispatch kitendpoint.Endpoint
}

type ringPoint struct {
	hash uint64
	idx  int32
}

type ring struct {
	snap   *snapshot
	points []ringPoint
}

// NewSticky returns a consistent-hashing balancer over e.
func NewSticky(e *Endpointer, opts ...StickyOption) (*Sticky, error) {
	if err := checkEndpointer(e); err != nil {
		return nil, err
	}
	o := stickyOptions{key: StickyKey, replicas: DefaultStickyReplicas}
	for _, opt := range opts {
		if err := opt.applySticky(&o); err != nil {
			return nil, err
		}
	}
	b := &Sticky{e: e, opts: o}
	b.dispatch = b.call
	return b, nil
}

// Endpoint implements go-kit's lb.Balancer: it returns an endpoint that picks
// the instance of each call's key. It does not allocate.
func (b *Sticky) Endpoint() (kitendpoint.Endpoint, error) {
	s := b.e.snap.Load()
	if len(s.instances) == 0 {
		return nil, s.emptyErr()
	}
	return b.dispatch, nil
}

func (b *Sticky) call(ctx context.Context, request any) (any, error) {
	in, err := b.pick(ctx, triedSet{})
	if err != nil {
		return nil, err
	}
	return in.call(ctx, request)
}

func (b *Sticky) pick(ctx context.Context, tried triedSet) (*instance, error) {
	s := b.e.snap.Load()
	n := len(s.instances)
	if n == 0 {
		return nil, s.emptyErr()
	}
	key := b.opts.key(ctx)
	if key == "" {
		return choose(s, int((b.rr.Add(1)-1)%uint64(n)), &tried), nil
	}
	r := b.ringFor(s)
	h := hashString(key)
	pts := r.points
	pos, _ := slices.BinarySearchFunc(pts, h, func(p ringPoint, h uint64) int {
		switch {
		case p.hash < h:
			return -1
		case p.hash > h:
			return 1
		}
		return 0
	})
	var fallback *instance
	for k := 0; k < len(pts); k++ {
		in := s.instances[pts[(pos+k)%len(pts)].idx]
		if tried.has(in) {
			continue
		}
		if in.available() {
			return in, nil
		}
		if fallback == nil {
			fallback = in
		}
	}
	if fallback != nil {
		return fallback, nil
	}
	return s.instances[pts[pos%len(pts)].idx], nil
}

// ringFor returns the ring of s, building it once per snapshot.
func (b *Sticky) ringFor(s *snapshot) *ring {
	if r := b.ring.Load(); r != nil && r.snap == s {
		return r
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.ring.Load(); r != nil && r.snap == s {
		return r
	}
	r := &ring{snap: s, points: make([]ringPoint, 0, len(s.instances)*b.opts.replicas)}
	var buf []byte
	for i, in := range s.instances {
		for k := 0; k < b.opts.replicas; k++ {
			buf = append(append(append(buf[:0], in.name...), '#'), strconv.Itoa(k)...)
			r.points = append(r.points, ringPoint{hash: hashBytes(buf), idx: int32(i)})
		}
	}
	slices.SortFunc(r.points, func(a, c ringPoint) int {
		switch {
		case a.hash < c.hash:
			return -1
		case a.hash > c.hash:
			return 1
		}
		return int(a.idx - c.idx)
	})
	b.ring.Store(r)
	return r
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// hashString is 64-bit FNV-1a followed by a murmur3 finalizer, which spreads
// the similar strings of ring points and keys over the whole ring.
func hashString(s string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return mix(h)
}

func hashBytes(b []byte) uint64 {
	h := uint64(fnvOffset)
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return mix(h)
}

func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
