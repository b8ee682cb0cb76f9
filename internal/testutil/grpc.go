package testutil

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// EchoMethod is the one method of EchoDesc.
const EchoMethod = "/gracekit.test.Echo/Say"

// echoDesc is a one-method gRPC service over the well-known StringValue,
// so that tests need no generated code: Say answers prefix+request.
// Register it with RegisterEcho.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "gracekit.test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Say",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			call := func(_ context.Context, req any) (any, error) {
				return wrapperspb.String(srv.(echo).prefix + req.(*wrapperspb.StringValue).GetValue()), nil
			}
			if icpt == nil {
				return call(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: EchoMethod}, call)
		},
	}},
}

type echo struct{ prefix string }

// RegisterEcho registers the echo service on s, answering prefix+request.
func RegisterEcho(s *grpc.Server, prefix string) { s.RegisterService(&echoDesc, echo{prefix}) }

// Say calls the echo service over cc.
func Say(ctx context.Context, cc grpc.ClientConnInterface, s string) (string, error) {
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, EchoMethod, wrapperspb.String(s), out)
	return out.GetValue(), err
}

// QuotesService is the service RegisterQuotes registers: Get answers the
// id of the instance that served it, after some work, so that calls
// overlap a stop.
const QuotesService = "gracekit.test.Quotes"

var quotesDesc = grpc.ServiceDesc{
	ServiceName: QuotesService,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Get",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			q := srv.(quotes)
			call := func(context.Context, any) (any, error) {
				time.Sleep(q.work)
				return wrapperspb.String(q.id), nil
			}
			if icpt == nil {
				return call(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + QuotesService + "/Get"}, call)
		},
	}},
}

type quotes struct {
	id   string
	work time.Duration
}

// RegisterQuotes registers QuotesService on s, answering id after work.
func RegisterQuotes(s *grpc.Server, id string, work time.Duration) {
	s.RegisterService(&quotesDesc, quotes{id, work})
}
