package grpcresolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	kitsd "github.com/go-kit/kit/sd"
	"google.golang.org/grpc/attributes"
	"google.golang.org/grpc/resolver"

	"github.com/gracekit/gracekit/sd"
)

// ccResolver watches one service for one ClientConn. Its goroutine (run)
// is the only one that calls cc; Close stops it and waits for it.
type ccResolver struct {
	b       *Builder
	service string
	cc      resolver.ClientConn
	log     *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	now    chan struct{} // ResolveNow hints, at most one pending
	once   sync.Once

	// Owned by run.
	last      []resolver.Address // last pushed, nil before the first push
	pushed    bool               // last is what the ClientConn holds
	ever      bool               // something was pushed
	inError   bool               // the Instancer's last word was an error
	recovered time.Time          // when the last error cleared
}

func newResolver(b *Builder, service string, cc resolver.ClientConn) *ccResolver {
	r := &ccResolver{
		b: b, service: service, cc: cc,
		log:  b.log.With("service", service),
		done: make(chan struct{}),
		now:  make(chan struct{}, 1),
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	go r.run()
	return r
}

// ResolveNow implements resolver.Resolver. The Instancer watches ZooKeeper
// and publishes every change, so there is nothing to re-read: it is a
// resync hint. The resolver looks at the Instancer's current set and error
// again and pushes the set if it differs from the last one pushed, which
// catches instance records whose data changed without changing the
// address set (the Instancer sends no event for those). It does not block.
func (r *ccResolver) ResolveNow(resolver.ResolveNowOptions) {
	select {
	case r.now <- struct{}{}:
	default:
	}
}

// Close implements resolver.Resolver: it stops the resolver's goroutine
// and waits for it, leaving the Instancer, which the consumer shares, as
// it is. It is idempotent.
func (r *ccResolver) Close() {
	r.once.Do(r.cancel)
	<-r.done
}

func (r *ccResolver) run() {
	defer close(r.done)
	in := r.load()
	if in == nil {
		return
	}
	r.b.watch(r.service, in)
	defer r.b.unwatch(r.service)
	// Buffered: Register sends the current set before it returns.
	events := make(chan kitsd.Event, 1)
	in.Register(events)
	defer in.Deregister(events)

	var hold *time.Timer
	var holdC <-chan time.Time
	defer func() {
		if hold != nil {
			hold.Stop()
		}
	}()
	for {
		var err error
		select {
		case <-r.ctx.Done():
			return
		case ev := <-events:
			err = ev.Err
		case <-r.now:
			err = viewErr(in)
		case <-holdC:
			holdC = nil
			err = viewErr(in)
		}
		wait := r.update(in, err)
		if hold != nil {
			hold.Stop()
			hold, holdC = nil, nil
		}
		if wait > 0 {
			hold = time.NewTimer(wait)
			holdC = hold.C
		}
	}
}

// viewErr is the Instancer's error, nil while it serves a snapshot's set
// (sd.NewInstancerFallback): that set is pushed, as its events push it.
func viewErr(in *sd.Instancer) error {
	if _, stale := in.Stale(); stale {
		return nil
	}
	return in.Err()
}

// load gets the service's Instancer from the consumer, one bounded attempt
// at a time, reporting each failure to the ClientConn; nil once closed.
func (r *ccResolver) load() *sd.Instancer {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval = 100*time.Millisecond, 5*time.Second
	for {
		ctx, cancel := context.WithTimeout(r.ctx, r.b.opts.loadTimeout)
		in, err := r.b.c.RoutedInstancer(ctx, r.service)
		cancel()
		if err == nil {
			return in
		}
		if r.ctx.Err() != nil {
			return nil
		}
		r.log.Warn("loading the service failed", "err", err)
		r.cc.ReportError(fmt.Errorf("grpcresolver: service %q: %w", r.service, err))
		if errors.Is(err, sd.ErrClosed) {
			return nil // the consumer stopped: nothing will come
		}
		t := time.NewTimer(bo.NextBackOff())
		select {
		case <-t.C:
		case <-r.ctx.Done():
			t.Stop()
			return nil
		}
	}
}

// update hands the Instancer's set to the ClientConn, unless it is not to
// be believed: on a discovery error (err) it keeps the last set pushed and
// reports the error, as grpc-go keeps using a previous good update on a
// resolver error (grpc-go#7749); an empty set within the recovery hold is
// held back, and update returns how long to wait before looking again.
func (r *ccResolver) update(in *sd.Instancer, err error) (wait time.Duration) {
	insts := in.Instances()
	if err != nil {
		r.inError = true
		if !r.ever && len(insts) > 0 {
			// Nothing pushed yet: the Instancer's set is the last good one.
			r.push(insts)
		}
		r.pushed = false // push again once the error clears
		r.log.Warn("discovery error; keeping the last set", "err", err, "instances", len(r.last))
		r.cc.ReportError(fmt.Errorf("grpcresolver: service %q: %w", r.service, err))
		return 0
	}
	now := time.Now()
	if r.inError {
		r.inError, r.recovered = false, now
	}
	if len(insts) == 0 && len(r.last) > 0 {
		if left := r.b.opts.recoveryHold - now.Sub(r.recovered); left > 0 {
			r.log.Info("empty set right after a discovery error; holding the last set", "for", left)
			return left
		}
	}
	r.push(insts)
	return 0
}

func (r *ccResolver) push(insts []sd.Instance) {
	addrs := make([]resolver.Address, len(insts))
	for i, inst := range insts {
		addrs[i] = resolver.Address{Addr: inst.GRPCHostPort(), Attributes: attributes.New(instanceKey{}, instanceValue{inst})}
	}
	if r.pushed && equalAddrs(addrs, r.last) {
		return
	}
	eps := make([]resolver.Endpoint, len(addrs))
	for i, a := range addrs {
		eps[i] = resolver.Endpoint{Addresses: []resolver.Address{a}, Attributes: a.Attributes}
	}
	// An error means the balancer found the set unusable (empty, say): a
	// watch-based resolver has nothing better to offer until it changes.
	if err := r.cc.UpdateState(resolver.State{Addresses: addrs, Endpoints: eps}); err != nil {
		r.log.Debug("the ClientConn refused the set", "err", err, "instances", len(addrs))
	}
	r.last, r.pushed, r.ever = addrs, true, true
}

func equalAddrs(a, b []resolver.Address) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// instanceKey is the Attributes key of an address's sd.Instance.
type instanceKey struct{}

// instanceValue compares by content, so that pushing an unchanged set
// again keeps grpc-go's subchannels (it tells addresses apart by their
// Attributes).
type instanceValue struct{ inst sd.Instance }

func (v instanceValue) Equal(o any) bool {
	w, ok := o.(instanceValue)
	if !ok {
		return false
	}
	a, b := v.inst, w.inst
	return a.Name == b.Name && a.ID == b.ID && a.Address == b.Address && a.Port == b.Port &&
		a.SSLPort == b.SSLPort && a.Czxid == b.Czxid && a.URISpec == b.URISpec &&
		a.ServiceType == b.ServiceType && a.RegistrationTime.Equal(b.RegistrationTime) &&
		maps.Equal(a.Metadata, b.Metadata)
}

// String serves grpc-go's logs and channelz.
func (v instanceValue) String() string { return v.inst.Name + "/" + v.inst.ID }

// InstanceFromAddress returns the sd.Instance a resolver.Address of this
// package was made from: its id, metadata (instance_status included),
// ports and registration. The metadata is a copy.
func InstanceFromAddress(a resolver.Address) (sd.Instance, bool) {
	return instanceFrom(a.Attributes)
}

// InstanceFromEndpoint is InstanceFromAddress for a resolver.Endpoint, as
// an LB policy receives it.
func InstanceFromEndpoint(e resolver.Endpoint) (sd.Instance, bool) {
	return instanceFrom(e.Attributes)
}

func instanceFrom(a *attributes.Attributes) (sd.Instance, bool) {
	v, ok := a.Value(instanceKey{}).(instanceValue)
	if !ok {
		return sd.Instance{}, false
	}
	inst := v.inst
	inst.Metadata = maps.Clone(inst.Metadata)
	return inst, true
}
