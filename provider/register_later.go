package provider

import (
	"context"
	"errors"
	"fmt"
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
// out of service or delete. Other registration errors (an *sd.ConflictError,
// an ACL) still fail the Start. For a process that must serve through an
// outage (a gateway starting from its consumer's snapshot,
// docs/STATIC-STABILITY.md).
func WithRegisterWhenReachable() Option {
	return optionFunc(func(o *options) error { o.registerLater = true; return nil })
}

// errUnreachable ends a registration attempt that no server answered.
var errUnreachable = errors.New("provider: no ZooKeeper server gave a session")

// lateRegistration is a registration left to the background.
type lateRegistration struct {
	mu         sync.Mutex
	cancel     context.CancelFunc // nil when none runs
	done       chan struct{}
	registered bool // it succeeded
}

// register registers reg within ctx; with WithRegisterWhenReachable, an
// ensemble that does not answer leaves it to the background.
func (p *Provider) register(ctx context.Context, reg *sd.Registrar, client *sd.Client) error {
	if !p.opts.registerLater {
		return reg.RegisterContext(ctx)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t := time.AfterFunc(RegisterReachWait, func() {
		if !client.HadSession() {
			cancel(errUnreachable)
		}
	})
	err := reg.RegisterContext(rctx)
	t.Stop()
	// Any other failure came from a server (an ACL, a conflict), or ended
	// the Start on purpose (ctx).
	unreachable := errors.Is(context.Cause(rctx), errUnreachable)
	if err == nil || ctx.Err() != nil || (!unreachable && client.HadSession()) {
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
		bo := backoff.NewExponentialBackOff()
		bo.InitialInterval, bo.MaxInterval = 250*time.Millisecond, 5*time.Second
		for {
			err := reg.RegisterContext(bctx)
			if err == nil {
				l.mu.Lock()
				l.registered = true
				l.mu.Unlock()
				p.log.Info("registered once ZooKeeper answered")
				return
			}
			if bctx.Err() != nil {
				return
			}
			p.log.Debug("registering failed; trying again", "err", err)
			t := time.NewTimer(bo.NextBackOff())
			select {
			case <-t.C:
			case <-bctx.Done():
				t.Stop()
				return
			}
		}
	}()
	return nil
}

// endLate stops a background registration and waits for it, within ctx;
// pending says that one ran and never registered: there is nothing to
// take out of service, and nothing to delete unless ZooKeeper ever
// answered.
func (p *Provider) endLate(ctx context.Context) (pending bool, err error) {
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
