// Package consumer assembles the calling side of gracekit in plain Go: per
// service, an sd.Instancer feeds an endpoint.Endpointer, whose balancer is
// wrapped by endpoint.NewRetry. A consumer that is also a gateway asks for
// a flush receiver (FlushHandler): providers that stop tell it to evict
// them at once. fxmodule's Consumer and Gateway modules are thin glue over
// this package; tests, benchmarks and examples use it directly.
//
//	sess, _ := sd.NewSession("zk1:2181,zk2:2181")
//	c, _ := consumer.New(sess)
//	if err := c.Start(ctx); err != nil { ... }
//	defer c.Stop(context.Background())
//	quote, _ := c.Endpoint(ctx, "quote", httpFactory.Factory)
package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitsd "github.com/go-kit/kit/sd"
	kitlb "github.com/go-kit/kit/sd/lb"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/internal/runstate"
	"github.com/gracekit/gracekit/lifecycle"
	"github.com/gracekit/gracekit/sd"
)

// The Endpointers weigh instances by what the Instancer tells of them, and
// key each ramp by its registration.
var _ endpoint.RegistrationDescriber = (*sd.Instancer)(nil)

// An Endpoint's balancer names the service and says whether none is
// registered or none is UP when it has no instance to pick.
var _ endpoint.InstanceCounter = (*sd.Instancer)(nil)

// Option configures a Consumer.
type Option interface{ applyConsumer(*options) error }

type options struct {
	logger    *slog.Logger
	instancer []sd.InstancerOption
	metrics   func(service string) []sd.InstancerOption
	slowStart *endpoint.SlowStart // nil: none
	snapshot  snapshotOptions
}

type optionFunc func(*options) error

func (f optionFunc) applyConsumer(o *options) error { return f(o) }

// WithLogger sets the logger of the consumer and of what it builds
// (default: silent).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) error {
		if l == nil {
			return fmt.Errorf("consumer: nil logger")
		}
		o.logger = l
		return nil
	})
}

// WithInstancerOptions are given to every sd.Instancer (base path, codec...).
func WithInstancerOptions(opts ...sd.InstancerOption) Option {
	return optionFunc(func(o *options) error { o.instancer = append(o.instancer, opts...); return nil })
}

// WithInstancerMetrics gives each service's Instancer the options f
// returns for it (sd.WithMetrics with the service as a label, typically).
func WithInstancerMetrics(f func(service string) []sd.InstancerOption) Option {
	return optionFunc(func(o *options) error { o.metrics = f; return nil })
}

// WithSlowStart gives every endpoint that Endpoint builds
// endpoint.WithSlowStart(window, aggression, minWeight): an instance that
// joins a service after the consumer's first load of it is ramped in from
// its registration time. An endpoint's own WithEndpointer options come
// after it and may set another. The arguments are checked here.
func WithSlowStart(window time.Duration, aggression, minWeight float64) Option {
	return optionFunc(func(o *options) error {
		s := endpoint.SlowStart{Window: window, Aggression: aggression, MinWeight: minWeight}
		if err := s.Check(); err != nil {
			return fmt.Errorf("consumer: %w", err)
		}
		o.slowStart = &s
		return nil
	})
}

// SlowStart is the ramp WithSlowStart set, and whether one is set: what a
// gRPC client of the same services gives grpcresolver's balancer.
func (c *Consumer) SlowStart() (endpoint.SlowStart, bool) {
	if c.opts.slowStart == nil {
		return endpoint.SlowStart{}, false
	}
	return *c.opts.slowStart, true
}

// Consumer holds the Instancers and Endpointers of the services a process
// calls, over one sd.Session. It is safe for concurrent use.
type Consumer struct {
	sess *sd.Session
	opts options
	log  *slog.Logger

	run runstate.Machine

	life    context.Context // ends when the Consumer stops: every call waiting on a load ends
	endLife context.CancelFunc

	snap *snapshots // nil without WithSnapshot

	mu       sync.Mutex
	client   *sd.Client          // set while started
	services map[string]*service // nil once stopped
}

// service is one called service: its Instancer, or the one being made,
// and the Endpointers over it.
type service struct {
	in          *sd.Instancer
	err         error
	ready       chan struct{} // closed once in or err is set
	endpointers []*endpoint.Endpointer
	routed      bool       // calls go to it through something else than an Endpointer (RoutedInstancer)
	changes     *changeLog // logs in's changes; set with in
}

// New returns a Consumer over sess. It does no I/O: Start does.
func New(sess *sd.Session, opts ...Option) (*Consumer, error) {
	if sess == nil {
		return nil, fmt.Errorf("consumer: nil session (want one from sd.NewSession)")
	}
	o := options{logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		if err := opt.applyConsumer(&o); err != nil {
			return nil, err
		}
	}
	c := &Consumer{sess: sess, opts: o, log: o.logger.With("component", "consumer"), services: map[string]*service{}}
	c.life, c.endLife = context.WithCancel(context.Background())
	if o.snapshot.dir != "" {
		c.snap = newSnapshots(c, o.snapshot)
	}
	return c, nil
}

// Start connects the session (or joins it, when another role started it),
// taking one share of it. It follows lifecycle.State's table: a second
// Start returns lifecycle.ErrStarted and a Start after Stop
// lifecycle.ErrStopped, both changing nothing; a failed Start holds
// nothing and may be retried; a Stop during Start cancels it.
func (c *Consumer) Start(ctx context.Context) error {
	err := c.run.Start(ctx, func(ctx context.Context) error {
		cl, err := c.sess.Start(ctx)
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.client = cl
		c.mu.Unlock()
		if c.snap != nil {
			c.snap.start()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	return nil
}

// State is where the consumer is in its life.
func (c *Consumer) State() lifecycle.State { return c.run.State() }

// Instancer returns the Instancer of name, starting it on first use. The
// first call waits until the service was read from ZooKeeper without error
// (sd.NewInstancerContext): when ctx ends first it returns that read's
// error, or ctx's, and keeps nothing, so that a later call tries again. A
// missing service node is a service without instances, not an error.
// Calls that arrive meanwhile get the first call's result. From the first
// load on, each change of the service's instance set is logged at info
// (WithLogger), "instances changed" with the service, the count and the
// instances added and removed; at most one line per ChangeLogInterval, the
// changes within it folded into the next line, which counts them.
func (c *Consumer) Instancer(ctx context.Context, name string) (*sd.Instancer, error) {
	c.mu.Lock()
	switch {
	case c.services == nil:
		c.mu.Unlock()
		return nil, sd.ErrClosed
	case c.client == nil:
		c.mu.Unlock()
		return nil, fmt.Errorf("consumer: Instancer(%q) before Start: %w", name, sd.ErrNotStarted)
	}
	if s, ok := c.services[name]; ok {
		c.mu.Unlock()
		select {
		case <-s.ready:
			return s.in, s.err
		case <-ctx.Done():
			return nil, fmt.Errorf("consumer: wait for the first load of service %q: %w", name, ctx.Err())
		case <-c.life.Done():
			return nil, fmt.Errorf("consumer: stopped while waiting for the first load of service %q: %w", name, sd.ErrClosed)
		}
	}
	s := &service{ready: make(chan struct{})}
	c.services[name] = s
	client := c.client
	c.mu.Unlock()

	opts := append([]sd.InstancerOption{sd.WithLogger(c.opts.logger)}, c.opts.instancer...)
	if c.opts.metrics != nil {
		opts = append(opts, c.opts.metrics(name)...)
	}
	// Stop ends the load too, whatever ctx says.
	lctx, cancel := context.WithCancel(ctx)
	stopLoad := context.AfterFunc(c.life, cancel)
	var in *sd.Instancer
	var err error
	if c.snap != nil {
		in, err = sd.NewInstancerFallback(lctx, client, name, sd.Fallback{After: c.snap.opts.startWait, Load: c.snap.load}, opts...)
	} else {
		in, err = sd.NewInstancerContext(lctx, client, name, opts...)
	}
	stopLoad()
	cancel()
	if err == nil && c.snap != nil {
		if readAt, stale := in.Stale(); stale {
			c.snap.served(name, readAt)
			c.log.Warn("ZooKeeper did not answer the first load in time; serving the service's snapshot until it does",
				"service", name, "instances", len(in.Instances()), "read_at", readAt.Format(time.RFC3339), "age", time.Since(readAt).Round(time.Second),
				"wait", c.snap.opts.startWait)
		}
	}
	var changes *changeLog
	if err == nil {
		changes = startChangeLog(in, c.log.With("service", name), ChangeLogInterval)
	}
	c.mu.Lock()
	// Stop ends life before it takes the map: a load it cancelled can be
	// back here first, and is a stop all the same.
	stopped := c.services == nil || c.life.Err() != nil
	switch {
	case stopped && err == nil:
		err = sd.ErrClosed
	case stopped:
		err = fmt.Errorf("consumer: stopped while loading service %q: %w (%w)", name, sd.ErrClosed, err)
	case !stopped && err != nil:
		delete(c.services, name) // a later call tries again
	}
	if err == nil {
		s.in, s.changes = in, changes
	}
	s.err = err
	close(s.ready)
	c.mu.Unlock()
	if stopped && in != nil {
		changes.stop()
		in.Stop() // Stop ran meanwhile and could not see it
	}
	return s.in, s.err
}

// RoutedInstancer is Instancer for a service the process calls through
// something other than Endpoint, such as a grpc-go resolver
// (grpcresolver): the consumer then counts the service as routed, so that
// its FlushHandler evicts flushed registrations from the Instancer, and so
// from whatever reads it.
func (c *Consumer) RoutedInstancer(ctx context.Context, name string) (*sd.Instancer, error) {
	in, err := c.Instancer(ctx, name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if s, ok := c.services[name]; ok {
		s.routed = true
	}
	c.mu.Unlock()
	return in, nil
}

// BalancerFunc builds the balancer of an endpoint.
type BalancerFunc func(e *endpoint.Endpointer) (kitlb.Balancer, error)

// RoundRobin is the default BalancerFunc: endpoint.NewRoundRobin.
func RoundRobin(e *endpoint.Endpointer) (kitlb.Balancer, error) { return endpoint.NewRoundRobin(e) }

// P2C is a BalancerFunc for endpoint.NewP2C, the least loaded of two picks.
func P2C(e *endpoint.Endpointer) (kitlb.Balancer, error) { return endpoint.NewP2C(e) }

// Random is a BalancerFunc for endpoint.NewRandom.
func Random(e *endpoint.Endpointer) (kitlb.Balancer, error) { return endpoint.NewRandom(e) }

// EndpointOption configures an endpoint that Endpoint builds.
type EndpointOption interface{ applyEndpoint(*endpointOptions) error }

type endpointOptions struct {
	balancer   BalancerFunc
	retry      []endpoint.RetryOption
	endpointer []endpoint.Option
}

type endpointOptionFunc func(*endpointOptions) error

func (f endpointOptionFunc) applyEndpoint(o *endpointOptions) error { return f(o) }

// WithBalancer sets the balancer; the default is RoundRobin.
func WithBalancer(f BalancerFunc) EndpointOption {
	return endpointOptionFunc(func(o *endpointOptions) error {
		if f == nil {
			return fmt.Errorf("consumer: nil BalancerFunc")
		}
		o.balancer = f
		return nil
	})
}

// WithRetry passes options to endpoint.NewRetry (attempts, backoff, budget,
// counters). Without it, endpoint's defaults apply.
func WithRetry(opts ...endpoint.RetryOption) EndpointOption {
	return endpointOptionFunc(func(o *endpointOptions) error { o.retry = append(o.retry, opts...); return nil })
}

// WithEndpointer passes options to endpoint.NewEndpointer (outlier
// ejection, classifier, counters). The consumer's logger goes first.
func WithEndpointer(opts ...endpoint.Option) EndpointOption {
	return endpointOptionFunc(func(o *endpointOptions) error { o.endpointer = append(o.endpointer, opts...); return nil })
}

// Endpoint returns a load-balanced, retrying endpoint to service name: its
// Instancer feeds an endpoint.Endpointer built with f, whose balancer
// (RoundRobin by default) endpoint.NewRetry wraps. Mark a non-idempotent
// call's ctx with endpoint.NonIdempotent. Each call builds an Endpointer:
// call it once per route, at start, not per request. ctx bounds the wait
// for the service's first load.
func (c *Consumer) Endpoint(ctx context.Context, name string, f kitsd.Factory, opts ...EndpointOption) (kitendpoint.Endpoint, error) {
	if f == nil {
		return nil, fmt.Errorf("consumer: nil factory for service %q", name)
	}
	o := endpointOptions{balancer: RoundRobin}
	for _, opt := range opts {
		if err := opt.applyEndpoint(&o); err != nil {
			return nil, err
		}
	}
	in, err := c.Instancer(ctx, name)
	if err != nil {
		return nil, err
	}
	// Held from the subscription until the Endpointer is listed, so that a
	// flush (Evicter holds it too) reaches this Endpointer before its answer.
	c.mu.Lock()
	defer c.mu.Unlock()
	eopts := []endpoint.Option{endpoint.WithLogger(c.opts.logger.With("service", name))}
	if s := c.opts.slowStart; s != nil {
		eopts = append(eopts, endpoint.WithSlowStart(s.Window, s.Aggression, s.MinWeight))
	}
	e, err := endpoint.NewEndpointer(in, f, append(eopts, o.endpointer...)...)
	if err != nil {
		return nil, fmt.Errorf("consumer: endpointer for %q: %w", name, err)
	}
	b, err := o.balancer(e)
	var call kitendpoint.Endpoint
	if err == nil {
		call, err = endpoint.NewRetry(b, o.retry...)
	}
	if err != nil {
		_ = e.Close()
		return nil, fmt.Errorf("consumer: endpoint for %q: %w", name, err)
	}
	s := c.services[name]
	if s == nil { // stopped meanwhile
		_ = e.Close()
		return nil, endpoint.ErrClosed
	}
	s.endpointers = append(s.endpointers, e)
	return call, nil
}

// Endpointers returns the Endpointers built for service name so far.
func (c *Consumer) Endpointers(name string) []*endpoint.Endpointer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.services[name]; ok {
		return append([]*endpoint.Endpointer(nil), s.endpointers...)
	}
	return nil
}

// Stop closes the Endpointers, then stops the Instancers, then gives the
// session's share back (the last role to leave closes it), within ctx. It
// follows lifecycle.State's table: a Stop before Start, or after a failed
// Start, has nothing to undo; later Stops wait for the first and return
// its result; after Stop, Start returns lifecycle.ErrStopped.
func (c *Consumer) Stop(ctx context.Context) error {
	return c.run.Stop(ctx, c.stop, c.close)
}

// close ends what the consumer holds without a session share: nothing to
// give back, and no Instancer can be made any more.
func (c *Consumer) close() { c.closeServices() }

// stop closes what the consumer built and gives the session's share back.
func (c *Consumer) stop(ctx context.Context) error {
	c.closeServices()
	return c.sess.Stop(ctx)
}

// closeServices closes the Endpointers, then stops the Instancers.
func (c *Consumer) closeServices() {
	c.endLife()
	if c.snap != nil {
		c.snap.halt() // its last round reads the Instancers
	}
	c.mu.Lock()
	services := c.services
	c.services = nil
	c.client = nil
	c.mu.Unlock()
	for _, s := range services {
		for _, e := range s.endpointers {
			_ = e.Close()
		}
	}
	for _, s := range services {
		select {
		case <-s.ready:
			if s.in != nil {
				s.changes.stop()
				s.in.Stop()
			}
		default: // still being made: its maker stops it
		}
	}
}
