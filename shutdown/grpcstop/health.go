package grpcstop

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gracekit/gracekit/shutdown"
)

const healthWatchMethod = "/grpc.health.v1.Health/Watch"

// Health sets hs's status for the whole server ("") and for each service
// to SERVING while r is ready and NOT_SERVING otherwise, now and at every
// change, until the returned func is called. A gRPC client or load
// balancer that watches health stops sending at the stop's first step.
func Health(r *shutdown.Readiness, hs *health.Server, services ...string) (stop func()) {
	set := func(ready bool) {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if ready {
			st = healthpb.HealthCheckResponse_SERVING
		}
		hs.SetServingStatus("", st)
		for _, s := range services {
			hs.SetServingStatus(s, st)
		}
	}
	return r.Notify(set)
}

// watches links the Watch streams the interceptor serves to the Adapter
// whose WithHealth names their health server: the interceptor exists
// before the server and its Adapter, and sees only the service
// implementation (hs).
var watches = struct {
	sync.Mutex
	m map[*health.Server]*watchSet
}{m: make(map[*health.Server]*watchSet)}

type watchSet struct {
	ended   bool // the drain started
	streams map[*watchStream]struct{}
}

// watch serves a Health/Watch on hs, ending it with status OK once the
// drain started and the stream sent a status other than SERVING.
func watch(hs *health.Server, srv any, ss grpc.ServerStream, handler grpc.StreamHandler) error {
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	w := &watchStream{ServerStream: ss, ctx: ctx, cancel: cancel, last: -1}
	watches.Lock()
	set := watches.m[hs]
	if set == nil {
		set = &watchSet{streams: make(map[*watchStream]struct{})}
		watches.m[hs] = set
	}
	set.streams[w] = struct{}{}
	if set.ended {
		w.end()
	}
	watches.Unlock()
	defer func() {
		watches.Lock()
		delete(set.streams, w)
		if len(set.streams) == 0 && !set.ended && watches.m[hs] == set {
			delete(watches.m, hs)
		}
		watches.Unlock()
	}()
	err := handler(srv, w)
	if w.endedByDrain() && ss.Context().Err() == nil {
		return nil // a clean end, not a failure
	}
	return err
}

// endWatches ends hs's Watch streams, those running and those to come.
func endWatches(hs *health.Server) {
	watches.Lock()
	defer watches.Unlock()
	set := watches.m[hs]
	if set == nil {
		set = &watchSet{streams: make(map[*watchStream]struct{})}
		watches.m[hs] = set
	}
	set.ended = true
	for w := range set.streams {
		w.end()
	}
}

// forgetWatches drops hs's entry once its server stopped for good.
func forgetWatches(hs *health.Server) {
	watches.Lock()
	defer watches.Unlock()
	if set := watches.m[hs]; set != nil && len(set.streams) == 0 {
		delete(watches.m, hs)
	}
}

// watchStream is a Watch stream whose context the drain ends, once the
// client was told something other than SERVING.
type watchStream struct {
	grpc.ServerStream
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	ended bool                                       // the drain started
	last  healthpb.HealthCheckResponse_ServingStatus // last status sent; -1 for none
	cut   bool                                       // ended by the drain
}

func (w *watchStream) Context() context.Context { return w.ctx }

func (w *watchStream) SendMsg(m any) error {
	err := w.ServerStream.SendMsg(m)
	if r, ok := m.(*healthpb.HealthCheckResponse); ok && err == nil {
		w.mu.Lock()
		w.last = r.GetStatus()
		w.maybeCutLocked()
		w.mu.Unlock()
	}
	return err
}

func (w *watchStream) end() {
	w.mu.Lock()
	w.ended = true
	w.maybeCutLocked()
	w.mu.Unlock()
}

func (w *watchStream) maybeCutLocked() {
	if w.ended && !w.cut && w.last >= 0 && w.last != healthpb.HealthCheckResponse_SERVING {
		w.cut = true
		w.cancel()
	}
}

func (w *watchStream) endedByDrain() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cut
}
