package provider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/gracekit/gracekit/sd"
)

// RegisterReachWait is how long a Start with WithRegisterWhenReachable
// waits for a first session from ZooKeeper before it registers in the
// background instead: a reachable ensemble gives one in milliseconds,
// trying a dead server first included.
const RegisterReachWait = 3 * time.Second

// WithRegisterWhenReachable makes a Start during a ZooKeeper outage serve
// and turn ready without registering, and register as soon as ZooKeeper
// answers, instead of failing: when no server gave the session one within
// RegisterReachWait (or the connect timeout), the registration goes on in
// the background, retried with a backoff, and one line says so. The stop
// ends it first; an instance that never registered has nothing to take
// out of service or delete. The watch of Flush.Gateways waits the same way
// (see watchGateways). Other registration errors (an *sd.ConflictError,
// an ACL) still fail the Start. For a process that must serve through an
// outage (a gateway starting from its consumer's snapshot,
// docs/STATIC-STABILITY.md).
func WithRegisterWhenReachable() Option {
	return optionFunc(func(o *options) error { o.registerLater = true; return nil })
}

// errUnreachable ends a registration attempt that no server answered.
var errUnreachable = errors.New("provider: no ZooKeeper server gave a session")

// lateRegistration is a registration left to the background, and the
// watch of the flush gateways (Flush.Gateways) left with it.
type lateRegistration struct {
	mu         sync.Mutex
	cancel     context.CancelFunc // nil when none runs
	done       chan struct{}
	registered bool // it succeeded

	gwCancel context.CancelFunc // nil when no gateway watch waits
	gwDone   chan struct{}
}

// watchGateways watches the flush gateways' services for the stop's
// flush (consumer.GatewayTargets waits for their first loads). With
// WithRegisterWhenReachable, ZooKeeper silent for RegisterReachWait does
// not fail the Start, as it would not fail the registration: the watch
// goes on in the background, and until it loaded the stop flushes the
// other targets only (an instance that was never registered was listed by
// no gateway, unless its consumer's snapshot answers first).
func (p *Provider) watchGateways(ctx context.Context, client *sd.Client) error {
	watch := func(ctx context.Context) error {
		src, err := p.opts.consumer.GatewayTargets(ctx, p.cfg.Instance, p.cfg.Flush.Gateways...)
		if err == nil {
			p.gw.Store(&src)
		}
		return err
	}
	if !p.opts.registerLater {
		return watch(ctx)
	}
	later, err := reachWithin(ctx, client, watch)
	if !later {
		return err
	}
	p.log.Warn("ZooKeeper is unreachable; watching the flush gateways as soon as it answers", "gateways", p.cfg.Flush.Gateways, "err", err)
	bctx, bcancel := context.WithCancel(context.Background())
	l := &p.late
	l.mu.Lock()
	l.gwCancel, l.gwDone = bcancel, make(chan struct{})
	done := l.gwDone
	l.mu.Unlock()
	go func() {
		defer close(done)
		err := retryUntilDone(bctx, p.log, "watching the flush gateways", watch, func(err error) bool {
			return errors.Is(err, sd.ErrClosed) // the consumer stopped
		})
		if err == nil {
			p.log.Info("watching the flush gateways once ZooKeeper answered", "gateways", p.cfg.Flush.Gateways)
		}
	}()
	return nil
}

// endLateGateways stops a background watch of the flush gateways and
// waits for it: it ends with its ctx (a first load in progress included).
func (p *Provider) endLateGateways() {
	l := &p.late
	l.mu.Lock()
	cancel, done := l.gwCancel, l.gwDone
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// register registers reg within ctx; with WithRegisterWhenReachable, an
// ensemble that does not answer leaves it to the background.
func (p *Provider) register(ctx context.Context, reg *sd.Registrar, client *sd.Client) error {
	if !p.opts.registerLater {
		return reg.RegisterContext(ctx)
	}
	later, err := reachWithin(ctx, client, reg.RegisterContext)
	if !later {
		return err
	}
	p.log.Warn("ZooKeeper is unreachable; serving unregistered, registering as soon as it answers", "err", err)
	bctx, bcancel := context.WithCancel(context.Background())
	l := &p.late
	l.mu.Lock()
	l.cancel, l.done, l.registered = bcancel, make(chan struct{}), false
	done := l.done
	l.mu.Unlock()
	go func() {
		defer close(done)
		if retryUntilDone(bctx, p.log, "registering", reg.RegisterContext, nil) == nil {
			l.mu.Lock()
			l.registered = true
			l.mu.Unlock()
			p.log.Info("registered once ZooKeeper answered")
		}
	}()
	return nil
}

// endLate stops a background registration and waits for it, within ctx;
// pending says that one ran and never registered: there is nothing to
// take out of service, and nothing to delete unless ZooKeeper ever
// answered.
func (p *Provider) endLate(ctx context.Context) (pending bool, err error) {
	p.endLateGateways()
	l := &p.late
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel == nil {
		return false, nil
	}
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
		return true, fmt.Errorf("provider: the background registration did not end before the stop's deadline: %w", ctx.Err())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.registered, nil
}

// reachWithin runs try within ctx, cut after RegisterReachWait when the
// Client never had a session. later says that the failure was ZooKeeper
// not answering, which WithRegisterWhenReachable leaves to the
// background; any other failure came from a server (an ACL, a conflict),
// or ended the Start on purpose (ctx).
func reachWithin(ctx context.Context, client *sd.Client, try func(context.Context) error) (later bool, err error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t := time.AfterFunc(RegisterReachWait, func() {
		if !client.HadSession() {
			cancel(errUnreachable)
		}
	})
	err = try(rctx)
	t.Stop()
	unreachable := errors.Is(context.Cause(rctx), errUnreachable)
	return !(err == nil || ctx.Err() != nil || (!unreachable && client.HadSession())), err
}

// retryUntilDone runs try with a backoff until it succeeds (nil), ctx
// ends, or final says an error is for good (both returned).
func retryUntilDone(ctx context.Context, log *slog.Logger, what string, try func(context.Context) error, final func(error) bool) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval = 250*time.Millisecond, 5*time.Second
	for {
		err := try(ctx)
		if err == nil || ctx.Err() != nil || (final != nil && final(err)) {
			return err
		}
		log.Debug(what+" failed; trying again", "err", err)
		t := time.NewTimer(bo.NextBackOff())
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}
