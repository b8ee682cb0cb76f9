package grpcstop

import (
	"context"
	"errors"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gracekit/gracekit/shutdown"
)

// Option configures Server.
type Option interface{ apply(*Adapter) }

type optionFunc func(*Adapter)

func (f optionFunc) apply(a *Adapter) { f(a) }

// WithHealth has the drain's start set every service of hs NOT_SERVING for
// good (hs.Shutdown) and end the Health/Watch streams on hs (see the
// package doc). Server registers hs on the server unless a health service
// is registered already. A nil hs is ignored.
func WithHealth(hs *health.Server) Option {
	return optionFunc(func(a *Adapter) { a.hs = hs })
}

// Adapter is a *grpc.Server as a shutdown.Server. Its methods are safe for
// concurrent use.
type Adapter struct {
	s  *grpc.Server
	hs *health.Server

	stopOnce sync.Once
	serves   sync.WaitGroup // the goroutines running s.Serve
	done     chan struct{}  // closed when GracefulStop and every Serve returned
	closedCh chan struct{}  // closed by Close

	mu       sync.Mutex
	stopping bool // Shutdown or Close began
	closed   bool
	conns    map[*conn]struct{} // accepted and not closed yet
}

var _ shutdown.Server = (*Adapter)(nil)

// Server adapts s to shutdown.Server. Call it before s serves: WithHealth
// may register a service on s.
func Server(s *grpc.Server, opts ...Option) *Adapter {
	a := &Adapter{s: s, done: make(chan struct{}), closedCh: make(chan struct{})}
	for _, o := range opts {
		o.apply(a)
	}
	if a.hs != nil {
		if _, ok := s.GetServiceInfo()[healthpb.Health_ServiceDesc.ServiceName]; !ok {
			healthpb.RegisterHealthServer(s, a.hs)
		}
	}
	return a
}

// Serve implements shutdown.Server: it serves on ln until Shutdown
// finished or Close ran, then returns nil. grpc-go's own Serve may keep
// running after Close until the last handler returned; Done says when.
// Serve after a stop began closes ln and returns grpc.ErrServerStopped.
func (a *Adapter) Serve(ln net.Listener) error {
	a.mu.Lock()
	if a.stopping {
		a.mu.Unlock()
		_ = ln.Close()
		return grpc.ErrServerStopped
	}
	a.serves.Add(1)
	a.mu.Unlock()
	errc := make(chan error, 1)
	go func() {
		defer a.serves.Done()
		errc <- a.s.Serve(&listener{Listener: ln, a: a})
	}()
	select {
	case err := <-errc:
		if errors.Is(err, grpc.ErrServerStopped) && a.isStopping() {
			return nil // the stop came before grpc-go's Serve began
		}
		return err
	case <-a.closedCh:
		return nil
	}
}

// Shutdown implements shutdown.Server: it starts the drain (see
// WithHealth, then GracefulStop, which refuses new calls and waits for
// those in flight, in a goroutine the Adapter owns) and returns nil once
// it finished, or ctx's error as soon as ctx ends, leaving the calls in
// flight running until Close.
func (a *Adapter) Shutdown(ctx context.Context) error {
	a.stop()
	select {
	case <-a.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close implements shutdown.Server: it starts the drain if Shutdown did
// not, closes every connection (their calls fail UNAVAILABLE on the
// client, and their handlers' contexts are canceled), makes Serve return
// and returns, without waiting for handlers.
func (a *Adapter) Close() error {
	a.stop()
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.closedCh)
	}
	conns := a.conns
	a.conns = nil
	a.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
	return nil
}

// Done is closed once the server stopped for good: after Shutdown or
// Close, when every handler returned and every goroutine the Adapter
// started exited.
func (a *Adapter) Done() <-chan struct{} { return a.done }

func (a *Adapter) isStopping() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopping
}

// stop begins the drain, once.
func (a *Adapter) stop() {
	a.stopOnce.Do(func() {
		a.mu.Lock()
		a.stopping = true
		a.mu.Unlock()
		if a.hs != nil {
			a.hs.Shutdown()
			endWatches(a.hs)
		}
		go func() {
			a.s.GracefulStop()
			a.serves.Wait() // each returns once GracefulStop did
			if a.hs != nil {
				forgetWatches(a.hs)
			}
			close(a.done)
		}()
	})
}

// listener tracks the connections it accepts, for Close.
type listener struct {
	net.Listener
	a *Adapter
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &conn{Conn: c, a: l.a}
	l.a.mu.Lock()
	if l.a.closed {
		l.a.mu.Unlock()
		_ = c.Close() // grpc-go sees it fail, not the listener
		return tc, nil
	}
	if l.a.conns == nil {
		l.a.conns = make(map[*conn]struct{})
	}
	l.a.conns[tc] = struct{}{}
	l.a.mu.Unlock()
	return tc, nil
}

// conn is an accepted connection that leaves the Adapter's set on Close.
type conn struct {
	net.Conn
	a *Adapter
}

func (c *conn) Close() error {
	c.a.mu.Lock()
	delete(c.a.conns, c)
	c.a.mu.Unlock()
	return c.Conn.Close()
}
