package endpoint

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	"github.com/go-kit/kit/metrics"
	kitsd "github.com/go-kit/kit/sd"
)

// counter is a go-kit metrics.Counter that keeps its total.
type counter struct{ v atomic.Int64 }

func (c *counter) With(...string) metrics.Counter { return c }
func (c *counter) Add(d float64)                  { c.v.Add(int64(d)) }
func (c *counter) Value() int64                   { return c.v.Load() }

// chanInstancer is a kitsd.Instancer whose set the test controls. Like
// go-kit's, it sends the current set on Register, and every Set or Fail
// reaches each registered channel before it returns.
type chanInstancer struct {
	mu   sync.Mutex
	chs  map[chan<- kitsd.Event]struct{}
	last kitsd.Event
}

func newChanInstancer(instances ...string) *chanInstancer {
	return &chanInstancer{chs: map[chan<- kitsd.Event]struct{}{}, last: kitsd.Event{Instances: instances}}
}

func (c *chanInstancer) Register(ch chan<- kitsd.Event) {
	c.mu.Lock()
	c.chs[ch] = struct{}{}
	ev := c.last
	c.mu.Unlock()
	ch <- ev
}

func (c *chanInstancer) Deregister(ch chan<- kitsd.Event) {
	c.mu.Lock()
	delete(c.chs, ch)
	c.mu.Unlock()
}

func (c *chanInstancer) Stop() {}

func (c *chanInstancer) registered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.chs)
}

func (c *chanInstancer) publish(ev kitsd.Event) {
	c.mu.Lock()
	c.last = ev
	chs := make([]chan<- kitsd.Event, 0, len(c.chs))
	for ch := range c.chs {
		chs = append(chs, ch)
	}
	c.mu.Unlock()
	for _, ch := range chs {
		ch <- ev
	}
}

func (c *chanInstancer) Set(instances ...string) { c.publish(kitsd.Event{Instances: instances}) }

func (c *chanInstancer) Fail(err error) { c.publish(kitsd.Event{Err: err}) }

// settle waits until e applied every event it received.
func settle(e *Endpointer) { e.sync <- struct{}{} }

// fake is one instance of a fleet: its endpoint answers its name, or the
// error set with fail; hold makes calls wait until released.
type fake struct {
	name    string
	calls   atomic.Int64
	closed  atomic.Int32
	closing atomic.Bool
	err     atomic.Pointer[error]

	mu      sync.Mutex
	hold    chan struct{} // non-nil: calls wait for it to close
	entered chan struct{} // receives once per held call entering
}

func (f *fake) Close() error  { f.closed.Add(1); return nil }
func (f *fake) Closing() bool { return f.closing.Load() }

func (f *fake) fail(err error) {
	if err == nil {
		f.err.Store(nil)
		return
	}
	f.err.Store(&err)
}

// holdCalls makes calls wait; it returns a channel that receives when a call
// is waiting and a func that releases them all.
func (f *fake) holdCalls() (entered <-chan struct{}, release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold = make(chan struct{})
	f.entered = make(chan struct{}, 100)
	hold := f.hold
	var once sync.Once
	return f.entered, func() {
		once.Do(func() {
			f.mu.Lock()
			f.hold = nil
			f.mu.Unlock()
			close(hold)
		})
	}
}

func (f *fake) endpoint(ctx context.Context, _ any) (any, error) {
	f.calls.Add(1)
	f.mu.Lock()
	hold, entered := f.hold, f.entered
	f.mu.Unlock()
	if hold != nil {
		entered <- struct{}{}
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if p := f.err.Load(); p != nil {
		return nil, &fakeError{name: f.name, err: *p}
	}
	return f.name, nil
}

// fakeError is a fake's failure; it names the fake.
type fakeError struct {
	name string
	err  error
}

func (e *fakeError) Error() string { return e.name + ": " + e.err.Error() }
func (e *fakeError) Unwrap() error { return e.err }

// fleet is a kitsd.Factory over fakes, one per instance string.
type fleet struct {
	mu sync.Mutex
	m  map[string][]*fake // every fake built per instance, newest last
}

func newFleet() *fleet { return &fleet{m: map[string][]*fake{}} }

func (fl *fleet) factory(instance string) (kitendpoint.Endpoint, io.Closer, error) {
	f := &fake{name: instance}
	fl.mu.Lock()
	fl.m[instance] = append(fl.m[instance], f)
	fl.mu.Unlock()
	return f.endpoint, f, nil
}

// get returns the newest fake of instance.
func (fl *fleet) get(t *testing.T, instance string) *fake {
	t.Helper()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fs := fl.m[instance]
	if len(fs) == 0 {
		t.Fatalf("no fake built for %q", instance)
	}
	return fs[len(fs)-1]
}

func (fl *fleet) built(instance string) int {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return len(fl.m[instance])
}

// clock is a manual clock for cool-offs.
type clock struct{ t atomic.Int64 }

func newClock() *clock                   { c := &clock{}; c.t.Store(1); return c }
func (c *clock) now() int64              { return c.t.Load() }
func (c *clock) advance(d time.Duration) { c.t.Add(int64(d)) }
func refused() error                     { return &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED} }

// newTestEndpointer builds an Endpointer over a chanInstancer and a fleet and
// closes it when the test ends.
func newTestEndpointer(t *testing.T, instances []string, opts ...Option) (*Endpointer, *chanInstancer, *fleet) {
	t.Helper()
	src := newChanInstancer(instances...)
	fl := newFleet()
	e, err := NewEndpointer(src, fl.factory, opts...)
	if err != nil {
		t.Fatalf("NewEndpointer: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, src, fl
}

// call picks from b and calls, returning the answering instance's name.
func call(b interface {
	Endpoint() (kitendpoint.Endpoint, error)
}) (string, error) {
	ep, err := b.Endpoint()
	if err != nil {
		return "", err
	}
	resp, err := ep(context.Background(), nil)
	if fe := (*fakeError)(nil); errors.As(err, &fe) {
		return fe.name, err
	}
	if err != nil {
		return "", err
	}
	return resp.(string), nil
}

var errBoom = errors.New("boom")

// benchResponse boxes without allocating, so benchmarks count only ours.
var benchResponse any = struct{}{}

func benchFactory(string) (kitendpoint.Endpoint, io.Closer, error) {
	return func(context.Context, any) (any, error) { return benchResponse, nil }, nil, nil
}
