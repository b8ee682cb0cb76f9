// Package grpcstop serves and drains a gRPC server in a shutdown.Sequence,
// as the package shutdown does for net/http:
//
//   - Server adapts a *grpc.Server to shutdown.Server (an *Adapter). Its
//     Shutdown starts GracefulStop in a goroutine the Adapter owns and
//     returns when it finished or when ctx ends, whatever the handlers do
//     (grpc-go's GracefulStop waits for every handler: grpc-go#2448); the
//     calls still running are then still counted in flight, so the
//     Sequence reports them cut. Close closes every connection at once and
//     returns; Serve returns once Close ran. Done is closed when the server
//     stopped for good: every handler returned and every goroutine the
//     Adapter started exited (a handler that ignores its ctx holds it).
//   - UnaryServerInterceptor and StreamServerInterceptor (or ServerOptions)
//     count the application's calls in the shutdown.Tracker and, once the
//     stop began, send the closing signal in the response metadata (key
//     ClosingKey), in the header when it can still be sent and in the
//     trailer always. grpc-go's own services are not the application's
//     traffic (Infrastructure: health, reflection, channelz): not counted,
//     no closing signal, never a reason to keep quiescing or draining.
//   - Health keeps the standard health service (grpc.health.v1) in step
//     with the shutdown.Readiness: NOT_SERVING from the stop's first step.
//     With WithHealth, the drain's start makes it NOT_SERVING for good
//     (health.Server.Shutdown) and ends each Health/Watch stream served
//     through StreamServerInterceptor with status OK right after it sent
//     NOT_SERVING, so that a client's health check (grpc-go's
//     healthCheckConfig) neither holds the drain nor is cut by it.
//
// Server returned a shutdown.Server before issue 14; it returns the
// *Adapter now, which callers that assign it to shutdown.Config.Server
// need not notice.
//
// Wire them as:
//
//	srv := grpc.NewServer(grpcstop.ServerOptions(tracker)...)
//	hs := health.NewServer()
//	defer grpcstop.Health(readiness, hs, "my.Service")()
//	gs := grpcstop.Server(srv, grpcstop.WithHealth(hs)) // registers hs on srv
//	seq, err := shutdown.NewSequence(shutdown.Config{Server: gs, Tracker: tracker, Readiness: readiness, ...})
//	...
//	err = seq.Stop(ctx)
//	<-gs.Done() // or give up: a handler that ignores its ctx holds it
package grpcstop
