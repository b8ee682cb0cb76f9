// Command grpc is a gRPC service registered in ZooKeeper: Discovery serves
// the *grpc.Server on GRACEKIT_GRPC_PORT, registers that port, and keeps
// the standard health service in step with the stop.
package main

import (
	"context"
	"fmt"
	"os"

	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gracekit/gracekit/fxmodule"
)

func newGRPCServer(o fxmodule.GRPCServerOptions) *grpc.Server {
	s := grpc.NewServer(o...) // the module's interceptors count calls for the drain
	// With generated code: pb.RegisterQuotesServer(s, quotes{}). Register no
	// health service: Discovery registers the standard one.
	s.RegisterService(&quotesDesc, quotes{})
	return s
}

func main() {
	app := fx.New(
		fxmodule.Logger,    // fx's own events at debug: the first line you see is what matters
		fxmodule.FromEnv(), // GRACEKIT_GRPC_PORT=9090 instead of GRACEKIT_PORT
		fx.Provide(newGRPCServer),
		fxmodule.Discovery, // serves the *grpc.Server (and an *http.Server, if the app has one)
	)
	if err := app.Err(); err != nil { // a setting unset or wrong: said once, plainly
		fmt.Fprintln(os.Stderr, "grpc:", fxmodule.Cause(err))
		os.Exit(1)
	}
	app.Run()
}

// quotes answers quote.Quotes/Get: a symbol in, a price out. The service is
// described by hand over protobuf's well-known wrappers, so that this
// program builds without protoc.
type quotes struct{}

type quotesServer interface {
	Get(context.Context, *wrapperspb.StringValue) (*wrapperspb.DoubleValue, error)
}

func (quotes) Get(context.Context, *wrapperspb.StringValue) (*wrapperspb.DoubleValue, error) {
	return wrapperspb.Double(12.34), nil
}

var quotesDesc = grpc.ServiceDesc{
	ServiceName: "quote.Quotes",
	HandlerType: (*quotesServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Get",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			get := func(ctx context.Context, req any) (any, error) {
				return srv.(quotesServer).Get(ctx, req.(*wrapperspb.StringValue))
			}
			if icpt == nil {
				return get(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/quote.Quotes/Get"}, get)
		},
	}},
}
