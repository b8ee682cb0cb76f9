package shutdown

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"

	"github.com/gracekit/gracekit/endpoint"
)

// Tracker counts requests in flight and remembers when the last one
// arrived. The zero value is ready to use; a Tracker must not be copied
// after first use. Its methods are safe for concurrent use.
//
// Wrap the server's handler with Middleware, or go-kit endpoints with
// EndpointMiddleware, not both for the same request: each counts it once.
type Tracker struct {
	mu                  sync.Mutex
	inFlight            int
	lastArrival         time.Time
	deregistered        bool
	afterDeregistration int64
	draining            bool
	idle                chan struct{} // closed when inFlight drops to zero; nil when zero
}

// Begin counts a request that arrived now and returns the func that ends
// it, which must be called exactly once. The middlewares call it; use it
// directly for other transports.
func (t *Tracker) Begin() (end func()) {
	t.mu.Lock()
	t.inFlight++
	t.lastArrival = time.Now()
	if t.deregistered {
		t.afterDeregistration++
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	t.mu.Unlock()
	var once sync.Once
	return func() { once.Do(t.end) }
}

func (t *Tracker) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inFlight--
	if t.inFlight == 0 {
		close(t.idle)
		t.idle = nil
	}
}

// InFlight returns the number of requests in flight.
func (t *Tracker) InFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inFlight
}

// LastArrival returns when the last request arrived; zero if none did.
func (t *Tracker) LastArrival() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastArrival
}

// MarkDeregistered records that the instance left service discovery; the
// requests that arrive from now on are counted by AfterDeregistration.
func (t *Tracker) MarkDeregistered() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.deregistered = true
}

// AfterDeregistration returns how many requests arrived after
// MarkDeregistered.
func (t *Tracker) AfterDeregistration() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.afterDeregistration
}

// StartDraining makes Middleware set endpoint.ClosingHeader on every
// response from now on. The stop sequence calls it at its first step.
func (t *Tracker) StartDraining() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.draining = true
}

// Draining reports whether StartDraining was called.
func (t *Tracker) Draining() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.draining
}

// Drain waits until no request is in flight, or ctx is done, in which case
// it returns ctx's error. It does not stop new requests from arriving.
func (t *Tracker) Drain(ctx context.Context) error {
	for {
		t.mu.Lock()
		idle := t.idle
		t.mu.Unlock()
		if idle == nil {
			return nil
		}
		select {
		case <-idle:
			// A new request may have arrived since; look again.
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Middleware returns next wrapped to count each request while it runs, and
// to set endpoint.ClosingHeader to endpoint.ClosingValue on every response
// written once draining.
func (t *Tracker) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		end := t.Begin()
		defer end()
		cw := &closingWriter{ResponseWriter: w, t: t}
		next.ServeHTTP(cw, r)
		if !cw.wroteHeader && t.Draining() {
			// net/http writes the implicit 200 after the handler returns.
			w.Header().Set(endpoint.ClosingHeader, endpoint.ClosingValue)
		}
	})
}

// EndpointMiddleware returns go-kit endpoint middleware that counts each call
// while it runs. The closing signal is a transport matter: with go-kit's
// HTTP transport, wrap the server with Middleware instead.
func (t *Tracker) EndpointMiddleware() kitendpoint.Middleware {
	return func(next kitendpoint.Endpoint) kitendpoint.Endpoint {
		return func(ctx context.Context, request any) (any, error) {
			end := t.Begin()
			defer end()
			return next(ctx, request)
		}
	}
}

// closingWriter adds the closing header when the response header is
// written, if the tracker is draining at that moment.
type closingWriter struct {
	http.ResponseWriter
	t           *Tracker
	wroteHeader bool
}

func (w *closingWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.wroteHeader = true
		if w.t.Draining() {
			w.Header().Set(endpoint.ClosingHeader, endpoint.ClosingValue)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *closingWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Flush implements http.Flusher when the underlying writer does.
func (w *closingWriter) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack implements http.Hijacker when the underlying writer does.
func (w *closingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := w.ResponseWriter.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, errors.New("shutdown: response writer does not support hijacking")
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *closingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
