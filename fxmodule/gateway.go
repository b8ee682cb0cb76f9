package fxmodule

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitsd "github.com/go-kit/kit/sd"
	kitlb "github.com/go-kit/kit/sd/lb"
	"go.uber.org/fx"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown/flush"
)

// Gateway is the consumer-side module. It includes everything Discovery
// provides and does (use one of the two, not both): the gateway registers
// itself with its flush path in its metadata (sd.MetadataFlushPath), so
// that providers listing its service in Config.FlushGateways find it, and
// goes through the same start and stop sequence. It also needs
// Config.FlushSecret, and provides:
//
//   - *Upstreams: load-balanced, retrying endpoints for named services;
//   - *flush.Handler: the flush handler, which the module already serves
//     at Config.FlushPath (default DefaultFlushPath) on the app's
//     *http.Server, outside the Tracker.
//
// A signed flush request for a service evicts the registration it names
// (id and creation zxid) from the service's sd.Instancer, and then from
// every Endpointer that Upstreams built for it (by the host:port ZooKeeper
// lists), before it is answered 200; a registration the Instancer does not
// list is answered 202 without evicting anything, and so is a service
// Upstreams never built an endpoint for (flush.NotRouted). The handler
// accepts requests meant for http://Config.Address:Config.Port followed by
// Config.FlushPath, the URL providers discover, and Config.FlushAudiences.
var Gateway = fx.Module("gracekit.gateway",
	fx.Provide(gatewaySettings),
	core,
	fx.Provide(newUpstreams, newFlushHandler),
)

func gatewaySettings(c Config) (*settings, error) { return c.check(true) }

// BalancerFunc builds the balancer of an upstream endpoint.
type BalancerFunc func(e *endpoint.Endpointer) (kitlb.Balancer, error)

// RoundRobin is the default BalancerFunc: endpoint.NewRoundRobin.
func RoundRobin(e *endpoint.Endpointer) (kitlb.Balancer, error) { return endpoint.NewRoundRobin(e) }

// P2C is a BalancerFunc for endpoint.NewP2C, the least-loaded of two
// random picks.
func P2C(e *endpoint.Endpointer) (kitlb.Balancer, error) { return endpoint.NewP2C(e) }

// Random is a BalancerFunc for endpoint.NewRandom.
func Random(e *endpoint.Endpointer) (kitlb.Balancer, error) { return endpoint.NewRandom(e) }

// UpstreamOption configures an endpoint that Upstreams.Endpoint builds.
type UpstreamOption interface {
	applyUpstream(*upstreamOptions) error
}

type upstreamOptions struct {
	balancer   BalancerFunc
	retry      []endpoint.RetryOption
	endpointer []endpoint.Option
}

type upstreamOptionFunc func(*upstreamOptions) error

func (f upstreamOptionFunc) applyUpstream(o *upstreamOptions) error { return f(o) }

// WithBalancer sets the balancer; the default is RoundRobin.
func WithBalancer(f BalancerFunc) UpstreamOption {
	return upstreamOptionFunc(func(o *upstreamOptions) error {
		if f == nil {
			return fmt.Errorf("fxmodule: nil BalancerFunc")
		}
		o.balancer = f
		return nil
	})
}

// WithRetry passes options to endpoint.NewRetry (attempts, backoff,
// budget, retry counter...). Without it, endpoint's defaults apply.
func WithRetry(opts ...endpoint.RetryOption) UpstreamOption {
	return upstreamOptionFunc(func(o *upstreamOptions) error {
		o.retry = append(o.retry, opts...)
		return nil
	})
}

// WithEndpointer passes options to endpoint.NewEndpointer (outlier
// ejection, classifier...). The module's logger is passed first.
func WithEndpointer(opts ...endpoint.Option) UpstreamOption {
	return upstreamOptionFunc(func(o *upstreamOptions) error {
		o.endpointer = append(o.endpointer, opts...)
		return nil
	})
}

// Upstreams builds the gateway's endpoints to other services and evicts
// their instances when a flush request arrives. Its Instancers and
// Endpointers are closed when the ZooKeeper session closes, after the
// server drained, the last stop step. It is safe for concurrent use.
type Upstreams struct {
	instancers *Instancers
	log        *slog.Logger

	mu       sync.Mutex
	services map[string]*upstream
	closed   bool
}

type upstream struct {
	instancer   *sd.Instancer
	endpointers []*endpoint.Endpointer
}

func newUpstreams(sess *session, in *Instancers, lp loggerParams) *Upstreams {
	u := &Upstreams{instancers: in, log: lp.logger(), services: map[string]*upstream{}}
	sess.onClose(u.close) // registered after the Instancers: closed before them
	return u
}

// Endpoint returns a load-balanced, retrying endpoint to service: the
// service's sd.Instancer feeds an endpoint.Endpointer built with f, whose
// balancer (RoundRobin by default) is wrapped by endpoint.NewRetry. Mark a
// non-idempotent call's ctx with endpoint.NonIdempotent. Each call builds
// a new Endpointer; call it once per route at construction, not per
// request. The first call for a service waits for its first instance set
// (at most the session timeout).
func (u *Upstreams) Endpoint(service string, f kitsd.Factory, opts ...UpstreamOption) (kitendpoint.Endpoint, error) {
	if f == nil {
		return nil, fmt.Errorf("fxmodule: nil factory for service %q", service)
	}
	o := upstreamOptions{balancer: RoundRobin}
	for _, opt := range opts {
		if err := opt.applyUpstream(&o); err != nil {
			return nil, err
		}
	}
	in, err := u.instancers.Instancer(service)
	if err != nil {
		return nil, fmt.Errorf("fxmodule: instancer for %q: %w", service, err)
	}
	// Held from the subscription until the Endpointer is listed, so that a
	// flush (evict holds it too) reaches this Endpointer before its 200.
	u.mu.Lock()
	defer u.mu.Unlock()
	e, err := endpoint.NewEndpointer(in, f, append([]endpoint.Option{endpoint.WithLogger(u.log.With("service", service))}, o.endpointer...)...)
	if err != nil {
		return nil, fmt.Errorf("fxmodule: endpointer for %q: %w", service, err)
	}
	b, err := o.balancer(e)
	if err == nil {
		var call kitendpoint.Endpoint
		if call, err = endpoint.NewRetry(b, o.retry...); err == nil {
			if u.closed {
				_ = e.Close()
				return nil, endpoint.ErrClosed
			}
			up := u.services[service]
			if up == nil {
				up = &upstream{instancer: in}
				u.services[service] = up
			}
			up.endpointers = append(up.endpointers, e)
			return call, nil
		}
	}
	_ = e.Close()
	return nil, fmt.Errorf("fxmodule: endpoint for %q: %w", service, err)
}

// Evicter returns the flush Evicter of service, false if no endpoint was
// built for it. It is the flush handler's flush.EvicterLookup.
func (u *Upstreams) Evicter(service string) (flush.Evicter, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	up, ok := u.services[service]
	if !ok {
		return nil, false
	}
	return flush.EvicterFunc(func(ctx context.Context, req flush.Request) (flush.Result, error) {
		return u.evict(ctx, up, req)
	}), true
}

// evict removes the registration req names from the Instancer, by id and
// creation zxid, and then from every Endpointer, by the host:port ZooKeeper
// lists (flush.DiscoveryEvicter); a registration the Instancer does not
// list is not evicted. Both are synchronous: when it returns no new call
// picks the instance.
func (u *Upstreams) evict(ctx context.Context, up *upstream, req flush.Request) (flush.Result, error) {
	// Evictions do not block; holding mu keeps an Endpointer being built
	// for this service from missing one.
	u.mu.Lock()
	defer u.mu.Unlock()
	res, err := flush.DiscoveryEvicter(up.instancer, up.endpointers...).Evict(ctx, req)
	if err != nil {
		return "", err
	}
	u.log.Info("flush: "+string(res), "service", req.Service, "instance", req.ID, "czxid", req.Czxid)
	return res, nil
}

func (u *Upstreams) close() {
	u.mu.Lock()
	u.closed = true
	var es []*endpoint.Endpointer
	for _, up := range u.services {
		es = append(es, up.endpointers...)
	}
	u.mu.Unlock()
	for _, e := range es {
		_ = e.Close()
	}
}

type flushResult struct {
	fx.Out

	Handler *flush.Handler
	Route   route `group:"gracekit.routes"`
}

// flushURL is the flush URL of a gateway instance as providers discover it
// (FlushGateways): http://address:port followed by its registered flush
// path (https when it registered only an SSL port); "" without one.
func flushURL(g sd.Instance) string {
	p := g.Metadata[sd.MetadataFlushPath]
	if p == "" {
		return ""
	}
	scheme := "http"
	if g.Port == 0 && g.SSLPort != 0 {
		scheme = "https"
	}
	return scheme + "://" + g.HostPort() + p
}

func newFlushHandler(s *settings, u *Upstreams, lp loggerParams) (flushResult, error) {
	self := sd.Instance{Address: s.Address, Port: s.Port, Metadata: map[string]string{sd.MetadataFlushPath: s.FlushPath}}
	audiences := append([]string{flushURL(self)}, s.FlushAudiences...)
	h, err := flush.NewHandler([]byte(s.FlushSecret), audiences, u.Evicter, append([]flush.HandlerOption{flush.WithLogger(lp.logger())}, lp.metrics().handlerOptions()...)...)
	if err != nil {
		return flushResult{}, fmt.Errorf("fxmodule: flush handler: %w", err)
	}
	return flushResult{Handler: h, Route: route{pattern: s.FlushPath, handler: h}}, nil
}
