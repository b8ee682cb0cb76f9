package sd

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gracekit/gracekit/internal/zkwire"
)

// watchAheadIdle is how long a Client keeps a watch session opened ahead
// that no Instancer or Catalog took, and how long a watchSession waits for
// one still dialling before it dials its own.
var watchAheadIdle = 5 * time.Second // a var for the tests

const watchAheadWait = time.Second

// WatchSessionAhead sets whether NewClient opens the read-only session of
// the first persistent watch before its own (default true; see NewClient),
// so that the first Instancer or Catalog built on the Client loads without
// waiting for another handshake. A Client that watches nothing within 5 s
// closes it; one that only registers can say false.
func WatchSessionAhead(on bool) ClientOption {
	return clientOptionFunc(func(o *clientOptions) error { o.noWatchAhead = !on; return nil })
}

// watchAhead is a watch session dialled ahead: the first watchSession of
// the Client takes it instead of dialling. Its goroutine, owned by the
// Client (Close waits for it), closes it when it goes untaken.
type watchAhead struct {
	cancel   context.CancelFunc
	ready    chan struct{} // the dial ended: conn or err is set
	claimed  chan struct{} // closed by take
	finished chan struct{} // the goroutine ended

	route atomic.Pointer[func(uint64, zkwire.WatcherEvent)] // the taker's

	mu    sync.Mutex
	conn  *zkwire.Conn
	err   error
	taken bool // by a watchSession, or given up
}

// openAhead dials addr as a watchSession does and keeps the session
// until take or until it idled for watchAheadIdle.
func (c *Client) openAhead(addr string) *watchAhead {
	ctx, cancel := context.WithCancel(context.Background())
	a := &watchAhead{
		cancel: cancel, ready: make(chan struct{}),
		claimed: make(chan struct{}), finished: make(chan struct{}),
	}
	idle := watchAheadIdle
	go func() {
		defer close(a.finished)
		dctx, dcancel := context.WithTimeout(ctx, c.opts.sessionTimeout)
		conn, err := c.dialWatch(dctx, addr, func(seq uint64, ev zkwire.WatcherEvent) {
			if r := a.route.Load(); r != nil {
				(*r)(seq, ev)
			}
		})
		dcancel()
		a.mu.Lock()
		a.conn, a.err = conn, err
		a.mu.Unlock()
		close(a.ready)
		if err != nil {
			return
		}
		t := time.NewTimer(idle)
		defer t.Stop()
		select {
		case <-a.claimed:
			return
		case <-t.C:
		case <-ctx.Done():
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if !a.taken {
			a.taken = true
			conn.Close()
		}
	}()
	return a
}

// failed tells, once ready is closed, whether the dial failed.
func (a *watchAhead) failed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.conn == nil
}

// take hands the session to a watchSession whose notifications go to
// route; nil when there is none to take (taken, failed, spent, idled out,
// or ctx ended first), and the caller dials its own.
func (a *watchAhead) take(ctx context.Context, route func(uint64, zkwire.WatcherEvent)) *zkwire.Conn {
	if a == nil {
		return nil
	}
	t := time.NewTimer(watchAheadWait)
	defer t.Stop()
	select {
	case <-a.ready:
	case <-t.C:
		return nil // stuck dialling a server that does not answer
	case <-ctx.Done():
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.taken || a.conn == nil || a.conn.Err() != nil {
		return nil
	}
	a.taken = true
	a.route.Store(&route)
	close(a.claimed)
	return a.conn
}

// close ends a session nobody took and waits for the goroutine, at most
// wait: a caller's dialer may not be interruptible; the goroutine then
// closes what it dialled itself when the dial returns.
func (a *watchAhead) close(wait time.Duration) bool {
	if a == nil {
		return true
	}
	a.cancel()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-a.finished:
		return true
	case <-t.C:
		return false
	}
}

// dialWatch opens a read-only session to addr for persistent watches,
// authenticated as the Client is.
func (c *Client) dialWatch(ctx context.Context, addr string, onEvent func(uint64, zkwire.WatcherEvent)) (*zkwire.Conn, error) {
	var auth []zkwire.Auth
	if c.opts.user != "" {
		auth = []zkwire.Auth{{Scheme: "digest", Data: []byte(c.opts.user + ":" + c.opts.password)}}
	}
	return zkwire.Dial(ctx, zkwire.Config{
		Addr: addr, Dial: c.opts.dialer, SessionTimeout: c.opts.sessionTimeout, Auth: auth,
		OnEvent: onEvent,
	})
}
