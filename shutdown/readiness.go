package shutdown

import (
	"net/http"
	"sync/atomic"
)

// Readiness is the state behind the /readyz and /livez probes. The zero
// value is not ready. Its methods are safe for concurrent use.
type Readiness struct {
	ready    atomic.Bool
	stopping atomic.Bool
}

// SetReady marks the instance ready, unless SetUnready was called: a stopping
// instance never becomes ready again.
func (r *Readiness) SetReady() {
	if !r.stopping.Load() {
		r.ready.Store(true)
	}
}

// SetUnready marks the instance as stopping; it is not ready from now on.
func (r *Readiness) SetUnready() {
	r.stopping.Store(true)
	r.ready.Store(false)
}

// Ready reports whether the instance is ready.
func (r *Readiness) Ready() bool { return r.ready.Load() }

// ReadyHandler answers /readyz: 200 "ok" when ready, 503 "not ready" before
// registration succeeded and 503 "stopping" once the stop began.
func (r *Readiness) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case r.ready.Load():
			writeText(w, http.StatusOK, "ok")
		case r.stopping.Load():
			writeText(w, http.StatusServiceUnavailable, "stopping")
		default:
			writeText(w, http.StatusServiceUnavailable, "not ready")
		}
	})
}

// LiveHandler answers /livez: 200 "ok" as long as the process serves HTTP,
// stopping included, so that an orchestrator does not kill a draining
// instance.
func (r *Readiness) LiveHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
}

func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(msg + "\n"))
}
