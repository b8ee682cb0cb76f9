// Package grpcstop serves and drains a gRPC server in a shutdown.Sequence,
// as the package shutdown does for net/http:
//
//   - Server adapts a *grpc.Server to shutdown.Server: the drain is
//     GracefulStop, bounded by the drain's ctx, then Stop;
//   - UnaryServerInterceptor and StreamServerInterceptor count every call in
//     the shutdown.Tracker and, once the stop began, send the closing signal
//     in the response metadata (key ClosingKey), in the header when it can
//     still be sent and in the trailer always;
//   - Health keeps the standard health service (grpc.health.v1) in step
//     with the shutdown.Readiness: NOT_SERVING from the stop's first step.
//
// Wire them as:
//
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(grpcstop.UnaryServerInterceptor(tracker)),
//		grpc.ChainStreamInterceptor(grpcstop.StreamServerInterceptor(tracker)),
//	)
//	hs := health.NewServer()
//	healthpb.RegisterHealthServer(srv, hs)
//	defer grpcstop.Health(readiness, hs, "my.Service")()
//	seq, err := shutdown.NewSequence(shutdown.Config{Server: grpcstop.Server(srv), Tracker: tracker, Readiness: readiness, ...})
package grpcstop

import (
	"context"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/shutdown"
)

// ClosingKey is the metadata key of the closing signal: endpoint.ClosingHeader
// in the lower case gRPC metadata requires, with value endpoint.ClosingValue.
var ClosingKey = strings.ToLower(endpoint.ClosingHeader)

// Server adapts s to shutdown.Server.
func Server(s *grpc.Server) shutdown.Server { return &server{s: s} }

type server struct{ s *grpc.Server }

// Serve implements shutdown.Server; it returns nil after a stop.
func (g *server) Serve(ln net.Listener) error { return g.s.Serve(ln) }

// Shutdown implements shutdown.Server: GracefulStop, which refuses new
// calls and waits for those in flight, until ctx ends; then Stop, which
// cuts them, and ctx's error.
func (g *server) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		g.s.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		g.s.Stop() // makes GracefulStop return
		<-done
		return ctx.Err()
	}
}

// Close implements shutdown.Server with Stop.
func (g *server) Close() error {
	g.s.Stop()
	return nil
}

func closingMD() metadata.MD { return metadata.Pairs(ClosingKey, endpoint.ClosingValue) }

// UnaryServerInterceptor counts each unary call in t while it runs and,
// once t is draining, sends the closing signal with its response.
func UnaryServerInterceptor(t *shutdown.Tracker) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		end := t.Begin()
		defer end()
		resp, err := handler(ctx, req)
		if t.Draining() {
			// The header may have been sent by the handler; the trailer
			// goes out in any case.
			_ = grpc.SetHeader(ctx, closingMD())
			_ = grpc.SetTrailer(ctx, closingMD())
		}
		return resp, err
	}
}

// StreamServerInterceptor counts each streaming call in t while it runs
// and, once t is draining, sends the closing signal in its header (when the
// stream begins during the drain) and its trailer.
func StreamServerInterceptor(t *shutdown.Tracker) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		end := t.Begin()
		defer end()
		if t.Draining() {
			_ = ss.SetHeader(closingMD())
		}
		err := handler(srv, ss)
		if t.Draining() {
			ss.SetTrailer(closingMD())
		}
		return err
	}
}

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
