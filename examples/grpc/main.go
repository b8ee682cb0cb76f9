// Command grpc is a gRPC provider in plain Go (no fx): provider.Config.GRPC
// serves a *grpc.Server built over the provider's Tracker, registers it in
// ZooKeeper, keeps the standard health service in step with readiness and
// stops it without a failed call. It serves two services, hand-written over
// well-known messages so that it needs no generated code:
//
//	gracekit.example.Quotes/Get, /PlaceOrder   (examples/internal/quotegrpc)
//	gracekit.example.Ticks/Watch               a server stream of price ticks
//
// A Ticks/Watch stream in flight at the stop either finishes within the
// drain's bound or is cut and counted (Report.CutByDrain); the stop never
// outlives its deadline.
//
//	GRACEKIT_ZK_SERVERS=127.0.0.1:2181 GRACEKIT_PORT=9090 go run ./grpc   # from examples/
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
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gracekit/gracekit/examples/internal/quotegrpc"
	"github.com/gracekit/gracekit/lifecycle"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/shutdown/grpcstop"
)

// TicksService is the streaming service this example serves.
const TicksService = "gracekit.example.Ticks"

// FullWatch is Ticks/Watch's full method name.
const FullWatch = "/" + TicksService + "/Watch"

// quotes answers Quotes/Get and Quotes/PlaceOrder, and Ticks/Watch: n
// ticks of a symbol, one every interval.
type quotes struct {
	id       string
	n        int
	interval time.Duration
}

func (q quotes) Get(_ context.Context, symbol string) (*structpb.Struct, error) {
	return structpb.NewStruct(map[string]any{"symbol": symbol, "price": 12.34, "instance": q.id})
}

func (q quotes) PlaceOrder(ctx context.Context, _ *structpb.Struct) (*structpb.Struct, error) {
	return structpb.NewStruct(map[string]any{"order_id": quotegrpc.KeyFrom(ctx), "instance": q.id})
}

// watch sends q.n ticks, one every q.interval, and ends, or ends with the
// stream's ctx (a client gone, or the drain's cut).
func (q quotes) watch(symbol string, stream grpc.ServerStream) error {
	t := time.NewTicker(q.interval)
	defer t.Stop()
	for i := range q.n {
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-t.C:
		}
		if err := stream.SendMsg(wrapperspb.String(fmt.Sprintf("%s:%s:%d", q.id, symbol, i))); err != nil {
			return err
		}
	}
	return nil
}

var ticksDesc = grpc.ServiceDesc{
	ServiceName: TicksService,
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Watch",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			return srv.(quotes).watch(in.GetValue(), stream)
		},
	}},
}

// Watch opens a Ticks/Watch stream for symbol on cc.
func Watch(ctx context.Context, cc grpc.ClientConnInterface, symbol string) (grpc.ClientStream, error) {
	s, err := cc.NewStream(ctx, &ticksDesc.Streams[0], FullWatch)
	if err != nil {
		return nil, err
	}
	if err := s.SendMsg(wrapperspb.String(symbol)); err != nil {
		return nil, err
	}
	return s, s.CloseSend()
}

// newProvider builds the provider of inst, serving on ln, over sess.
func newProvider(sess *sd.Session, inst sd.Instance, ln net.Listener, q quotes, cfg provider.Config, opts ...provider.Option) (*provider.Provider, error) {
	tracker := new(shutdown.Tracker)
	gs := grpc.NewServer(grpcstop.ServerOptions(tracker)...)
	quotegrpc.Register(gs, q)
	gs.RegisterService(&ticksDesc, q)
	cfg.Instance, cfg.GRPC, cfg.GRPCListener, cfg.Tracker = inst, gs, ln, tracker
	return provider.New(sess, cfg, opts...)
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
	sess, err := sd.NewSession(env("GRACEKIT_ZK_SERVERS", "127.0.0.1:2181"), sd.Logger(log))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	inst := sd.Instance{Name: env("GRACEKIT_SERVICE", "quotes-grpc"), ID: os.Getenv("GRACEKIT_INSTANCE_ID"),
		Address: env("GRACEKIT_ADDRESS", "127.0.0.1"), Port: port}
	p, err := newProvider(sess, inst, ln, quotes{id: inst.ID, n: 100, interval: 100 * time.Millisecond}, provider.Config{},
		provider.WithLogger(log), provider.WithRegistrarOptions(sd.BasePath(env("GRACEKIT_BASE_PATH", sd.DefaultBasePath))))
	if err != nil {
		_ = ln.Close()
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	err = p.Start(ctx)
	cancel()
	if err != nil {
		return err
	}
	log.Info("serving", "service", inst.Name, "instance", p.Instance().ID, "port", port)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	signal.Stop(sig) // a second signal kills
	ctx, cancel = context.WithTimeout(context.Background(), lifecycle.DefaultStopBudget)
	defer cancel()
	if err := p.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
		var de *shutdown.DrainError
		if !errors.As(err, &de) {
			return err
		}
	}
	r := p.Report()
	log.Info("stopped", "duration", r.Duration, "in_flight_at_drain", r.InFlightAtDrain, "cut_by_drain", r.CutByDrain)
	return nil
}
