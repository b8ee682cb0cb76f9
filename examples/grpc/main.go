// Command grpc is a gRPC provider that gracekit registers in ZooKeeper and
// stops without a failed call, in plain Go (no fx): the standard health
// service turns NOT_SERVING at the stop's first step, interceptors count
// the calls in flight and send the closing signal, and the drain is
// GracefulStop bounded by the drain timeout, then Stop.
//
// It serves gracekit.example.Quotes/Get, hand-written over the well-known
// StringValue message so that it needs no generated code:
//
//	GRACEKIT_ZK_SERVERS=127.0.0.1:2181 GRACEKIT_PORT=9090 go run ./grpc   # from examples/
//
// A consumer calls it through endpoint/grpcfactory (see that package's
// test in shutdown/grpcstop).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gracekit/gracekit/lifecycle"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/shutdown/grpcstop"
)

// ServiceName is the gRPC service this example serves.
const ServiceName = "gracekit.example.Quotes"

type quotes interface{ quote(symbol string) string }

type quoteServer struct{ id string }

func (q quoteServer) quote(symbol string) string { return fmt.Sprintf("%s:%s:12.34", q.id, symbol) }

var quotesDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*quotes)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Get",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			call := func(_ context.Context, req any) (any, error) {
				return wrapperspb.String(srv.(quotes).quote(req.(*wrapperspb.StringValue).GetValue())), nil
			}
			if icpt == nil {
				return call(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + ServiceName + "/Get"}, call)
		},
	}},
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "grpc:", err)
		os.Exit(1)
	}
}

func run() error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	port, err := strconv.Atoi(env("GRACEKIT_PORT", "9090"))
	if err != nil || port < 1 || port > 65535 {
		return fmt.Errorf("GRACEKIT_PORT %q: want a port from 1 to 65535", os.Getenv("GRACEKIT_PORT"))
	}
	client, err := sd.NewClient(env("GRACEKIT_ZK_SERVERS", "127.0.0.1:2181"), sd.Logger(log))
	if err != nil {
		return err
	}
	inst := sd.Instance{Name: env("GRACEKIT_SERVICE", "quotes-grpc"), ID: os.Getenv("GRACEKIT_INSTANCE_ID"),
		Address: env("GRACEKIT_ADDRESS", "127.0.0.1"), Port: port}
	reg, err := sd.NewRegistrar(client, inst, sd.BasePath(env("GRACEKIT_BASE_PATH", sd.DefaultBasePath)), sd.WithLogger(log))
	if err != nil {
		client.Close()
		return err
	}

	tracker, ready := &shutdown.Tracker{}, &shutdown.Readiness{}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpcstop.UnaryServerInterceptor(tracker)),
		grpc.ChainStreamInterceptor(grpcstop.StreamServerInterceptor(tracker)),
	)
	srv.RegisterService(&quotesDesc, quoteServer{id: reg.Instance().ID})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	defer grpcstop.Health(ready, hs, ServiceName)()

	seq, err := shutdown.NewSequence(shutdown.Config{
		Registration: reg, Tracker: tracker, Readiness: ready,
		Server: grpcstop.Server(srv), Addr: net.JoinHostPort("", strconv.Itoa(port)),
		CloseSession: func(context.Context) error { client.Close(); return nil },
	}, lifecycle.WithListener(lifecycle.SlogListener(log)))
	if err != nil {
		client.Close()
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	err = seq.Start(ctx)
	cancel()
	if err != nil {
		return err
	}
	log.Info("serving", "service", inst.Name, "port", port)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	signal.Stop(sig) // a second signal kills
	ctx, cancel = context.WithTimeout(context.Background(), lifecycle.DefaultStopBudget)
	defer cancel()
	if err := seq.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	r := seq.Report()
	log.Info("stopped", "duration", r.Duration, "in_flight_at_drain", r.InFlightAtDrain, "cut_by_drain", r.CutByDrain)
	return nil
}
