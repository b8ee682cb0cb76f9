package grpcstop

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/metadata"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/shutdown"
)

// ClosingKey is the metadata key of the closing signal: endpoint.ClosingHeader
// in the lower case gRPC metadata requires, with value endpoint.ClosingValue.
var ClosingKey = strings.ToLower(endpoint.ClosingHeader)

// infrastructure are the method prefixes of grpc-go's own services.
var infrastructure = []string{
	"/grpc.health.v1.Health/",
	"/grpc.reflection.",
	"/grpc.channelz.",
}

// Infrastructure reports whether fullMethod ("/package.Service/Method")
// belongs to grpc-go's health, reflection or channelz services, which the
// interceptors do not count as traffic.
func Infrastructure(fullMethod string) bool {
	for _, p := range infrastructure {
		if strings.HasPrefix(fullMethod, p) {
			return true
		}
	}
	return false
}

// ServerOptions returns the options that install UnaryServerInterceptor
// and StreamServerInterceptor for t, for grpc.NewServer.
func ServerOptions(t *shutdown.Tracker) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor(t)),
		grpc.ChainStreamInterceptor(StreamServerInterceptor(t)),
	}
}

func closingMD() metadata.MD { return metadata.Pairs(ClosingKey, endpoint.ClosingValue) }

// UnaryServerInterceptor counts each unary call in t while it runs and,
// once t is draining, sends the closing signal with its response.
// Infrastructure calls pass through untouched.
func UnaryServerInterceptor(t *shutdown.Tracker) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if Infrastructure(info.FullMethod) {
			return handler(ctx, req)
		}
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
// stream begins during the drain) and its trailer. Infrastructure calls
// are not counted; a Health/Watch on a *health.Server given to WithHealth
// ends when the drain starts (see the package doc).
func StreamServerInterceptor(t *shutdown.Tracker) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if Infrastructure(info.FullMethod) {
			if hs, ok := srv.(*health.Server); ok && info.FullMethod == healthWatchMethod {
				return watch(hs, srv, ss, handler)
			}
			return handler(srv, ss)
		}
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
