package shutdown

import (
	"net/http"
	"sync"
	"sync/atomic"
)

// Readiness is the state behind the /readyz and /livez probes. The zero
// value is not ready. Its methods are safe for concurrent use.
//
// Its state only moves forward: not ready, ready, stopping. Once
// SetUnready was called the instance is stopping and never ready again,
// whatever SetReady calls race it or follow it. Health is a second input
// (SetHealthy): a ready instance whose health check fails is not ready,
// without stopping, and is ready again when it passes.
type Readiness struct {
	state atomic.Int32 // a readinessState
	sick  atomic.Bool  // the instance's own health check fails
	// drained says an operator took the instance out (gracekit drain); it
	// only changes what /readyz says, SetHealthy(false) takes it out.
	drained atomic.Bool
	// stale: what the instance calls is known from a snapshot only (SetLive).
	stale atomic.Bool

	mu   sync.Mutex // serializes changes with their notifications
	subs map[int]func(ready bool)
	next int
}

type readinessState = int32

const (
	stateNotReady readinessState = iota
	stateReady
	stateStopping
)

// SetReady marks the instance ready, unless SetUnready was called: a stopping
// instance never becomes ready again.
func (r *Readiness) SetReady() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.CompareAndSwap(stateNotReady, stateReady) && !r.sick.Load() && !r.stale.Load() {
		r.notifyLocked(true)
	}
}

// SetHealthy records whether the instance's own health check passes. An
// unhealthy instance is not ready (/readyz answers 503 "unhealthy", the gRPC
// health service NOT_SERVING) until it is healthy again; a stopping one
// stays not ready whatever this says.
func (r *Readiness) SetHealthy(healthy bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sick.Swap(!healthy) == !healthy {
		return // no change
	}
	if r.state.Load() == stateReady && !r.stale.Load() {
		r.notifyLocked(healthy)
	}
}

// SetLive records whether the instance's view of the services it calls
// is live (read from the registry), for an instance whose readiness
// requires one: a stale view (a consumer serving from its snapshot) is
// not ready (/readyz answers 503 "serving from a snapshot", the gRPC
// health service NOT_SERVING) until it is live again; a stopping
// instance stays not ready whatever this says. Never called, it is live.
func (r *Readiness) SetLive(live bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stale.Swap(!live) == !live {
		return // no change
	}
	if r.state.Load() == stateReady && !r.sick.Load() {
		r.notifyLocked(live)
	}
}

// SetDrained records whether an operator drained the instance, so that
// /readyz says "drained by operator" rather than "unhealthy" while it is
// out for that reason. Readiness itself follows SetHealthy alone.
func (r *Readiness) SetDrained(drained bool) { r.drained.Store(drained) }

// Healthy reports what SetHealthy said last; true before any call.
func (r *Readiness) Healthy() bool { return !r.sick.Load() }

// SetUnready marks the instance as stopping; it is not ready from now on,
// for good.
func (r *Readiness) SetUnready() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.Swap(stateStopping) == stateReady && !r.sick.Load() && !r.stale.Load() {
		r.notifyLocked(false)
	}
}

// Notify calls f with the current readiness at once, then with the new one
// at every change, in order, until the returned func is called: true when
// the instance turns ready, false when its stop begins. Non-HTTP transports use it, e.g. the gRPC health
// service (grpcstop.Health). f is called from SetReady and SetUnready and
// must not block nor call them.
func (r *Readiness) Notify(f func(ready bool)) (cancel func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.subs == nil {
		r.subs = map[int]func(bool){}
	}
	id := r.next
	r.next++
	r.subs[id] = f
	f(r.Ready())
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.subs, id)
	}
}

func (r *Readiness) notifyLocked(ready bool) {
	for _, f := range r.subs {
		f(ready)
	}
}

// Ready reports whether the instance is ready.
func (r *Readiness) Ready() bool {
	return r.state.Load() == stateReady && !r.sick.Load() && !r.stale.Load()
}

// ReadyHandler answers /readyz: 200 "ok" when ready, 503 "not ready" before
// registration succeeded, 503 "unhealthy" while the health check fails (or
// "drained by operator", see SetDrained), 503 "serving from a snapshot"
// while the view is stale (SetLive) and 503 "stopping" once the stop
// began.
func (r *Readiness) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		switch r.state.Load() {
		case stateReady:
			if r.sick.Load() {
				if r.drained.Load() {
					writeText(w, http.StatusServiceUnavailable, "drained by operator")
					return
				}
				writeText(w, http.StatusServiceUnavailable, "unhealthy")
				return
			}
			if r.stale.Load() {
				writeText(w, http.StatusServiceUnavailable, "serving from a snapshot")
				return
			}
			writeText(w, http.StatusOK, "ok")
		case stateStopping:
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
