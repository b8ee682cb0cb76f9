package testutil

import (
	"context"

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
