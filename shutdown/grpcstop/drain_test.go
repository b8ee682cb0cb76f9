package grpcstop_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health" // also enables client-side health checking
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/shutdown/grpcstop"
)

// calls is a hand-written service with a unary Hold and a server-streaming
// Ticks whose behavior each test sets.
const callsService = "gracekit.test.Calls"

type callsServer struct {
	hold  func(ctx context.Context) error
	ticks func(ctx context.Context, send func(string) error) error
}

var callsDesc = grpc.ServiceDesc{
	ServiceName: callsService,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Hold",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			call := func(ctx context.Context, _ any) (any, error) {
				if err := srv.(*callsServer).hold(ctx); err != nil {
					return nil, err
				}
				return wrapperspb.String("held"), nil
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + callsService + "/Hold"}, call)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Ticks",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			return srv.(*callsServer).ticks(stream.Context(), func(s string) error { return stream.SendMsg(wrapperspb.String(s)) })
		},
	}},
}

// standIn is a Registration that always succeeds: these tests are about
// the server, not discovery.
type standIn struct{}

func (standIn) RegisterContext(context.Context) error      { return nil }
func (standIn) SetStatus(context.Context, sd.Status) error { return nil }
func (standIn) DeregisterContext(context.Context) error    { return nil }

type node struct {
	seq     *shutdown.Sequence
	gs      *grpcstop.Adapter
	tracker *shutdown.Tracker
	addr    string
}

// startNode serves calls with grpcstop (interceptors, health, Adapter) in
// a started shutdown.Sequence. When the test ends it stops the sequence
// and waits until the server stopped for good: tests release their
// handlers before.
func startNode(t *testing.T, calls *callsServer, cfg shutdown.Config) *node {
	t.Helper()
	n := &node{tracker: &shutdown.Tracker{}}
	ready := &shutdown.Readiness{}
	srv := grpc.NewServer(grpcstop.ServerOptions(n.tracker)...)
	srv.RegisterService(&callsDesc, calls)
	hs := health.NewServer()
	stopHS := grpcstop.Health(ready, hs, callsService)
	n.gs = grpcstop.Server(srv, grpcstop.WithHealth(hs))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.addr = ln.Addr().String()
	cfg.Registration, cfg.Tracker, cfg.Readiness = standIn{}, n.tracker, ready
	cfg.Server, cfg.Listener = n.gs, ln
	if n.seq, err = shutdown.NewSequence(cfg); err != nil {
		t.Fatal(err)
	}
	if err := n.seq.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = n.seq.Stop(ctx)
		stopHS()
		select {
		case <-n.gs.Done():
		case <-time.After(testutil.WaitLimit):
			t.Errorf("the gRPC server did not stop within %v", testutil.WaitLimit)
		}
	})
	return n
}

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// stop stops n with a deadline of d and checks that Stop returned before
// it.
func (n *node) stop(t *testing.T, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	deadline, _ := ctx.Deadline()
	err := n.seq.Stop(ctx)
	if late := time.Since(deadline); late >= 0 {
		t.Errorf("Stop returned %v after its ctx deadline", late.Round(time.Millisecond))
	}
	return err
}

func hold(ctx context.Context, cc *grpc.ClientConn) error {
	return cc.Invoke(ctx, "/"+callsService+"/Hold", wrapperspb.String("x"), new(wrapperspb.StringValue))
}

func ticks(ctx context.Context, cc *grpc.ClientConn) (grpc.ClientStream, error) {
	s, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/"+callsService+"/Ticks")
	if err != nil {
		return nil, err
	}
	if err := s.SendMsg(wrapperspb.String("x")); err != nil {
		return nil, err
	}
	return s, s.CloseSend()
}

// Issue 14, item 2: a handler that ignores its ctx does not hold the stop
// past its deadline; the stop says what it cut.
func TestDrainReturnsBeforeDeadlineWhenHandlerIgnoresCtx(t *testing.T) {
	release, ended := make(chan struct{}), make(chan struct{})
	n := startNode(t, &callsServer{hold: func(context.Context) error {
		defer close(ended)
		select { // 6 s, whatever its ctx says; the test releases it early
		case <-release:
		case <-time.After(6 * time.Second):
		}
		return nil
	}}, shutdown.Config{DrainTimeout: time.Second})
	defer func() { close(release); <-ended }()

	cc := dial(t, n.addr)
	callErr := make(chan error, 1)
	go func() { callErr <- hold(context.Background(), cc) }()
	testutil.WaitFor(t, "the call in flight", func() bool { return n.tracker.InFlight() == 1 })

	err := n.stop(t, 3*time.Second)
	var de *shutdown.DrainError
	if !errors.As(err, &de) || de.Cut != 1 {
		t.Fatalf("Stop: %v; want a *shutdown.DrainError with Cut 1", err)
	}
	if r := n.seq.Report(); r.CutByDrain != 1 {
		t.Errorf("Report.CutByDrain %d, want 1", r.CutByDrain)
	}
	if err := <-callErr; grpcstatus.Code(err) != codes.Unavailable {
		t.Errorf("the cut call's error: %v, want UNAVAILABLE", err)
	}
}

// Issue 14, item 3: calls still running at the end of the drain's bound
// are counted as cut, unary or streaming, even when their handlers return
// as soon as the cut cancels their ctx.
func TestCutByDrainCountsGRPCCalls(t *testing.T) {
	tests := []struct {
		give string
		call func(ctx context.Context, cc *grpc.ClientConn) error
	}{
		{"a unary call", hold},
		{"a server stream", func(ctx context.Context, cc *grpc.ClientConn) error {
			s, err := ticks(ctx, cc)
			for err == nil {
				err = s.RecvMsg(new(wrapperspb.StringValue))
			}
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			n := startNode(t, &callsServer{
				hold: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
				ticks: func(ctx context.Context, send func(string) error) error {
					tick := time.NewTicker(20 * time.Millisecond)
					defer tick.Stop()
					for {
						select {
						case <-ctx.Done():
							return ctx.Err()
						case <-tick.C:
							if err := send("tick"); err != nil {
								return err
							}
						}
					}
				},
			}, shutdown.Config{DrainTimeout: 500 * time.Millisecond})
			cc := dial(t, n.addr)
			callErr := make(chan error, 1)
			go func() { callErr <- tt.call(context.Background(), cc) }()
			testutil.WaitFor(t, "the call in flight", func() bool { return n.tracker.InFlight() == 1 })

			err := n.stop(t, 10*time.Second)
			var de *shutdown.DrainError
			if !errors.As(err, &de) || de.Cut < 1 {
				t.Errorf("Stop: %v; want a *shutdown.DrainError", err)
			}
			if r := n.seq.Report(); r.CutByDrain < 1 {
				t.Errorf("Report.CutByDrain %d, want 1", r.CutByDrain)
			}
			if err := <-callErr; grpcstatus.Code(err) != codes.Unavailable {
				t.Errorf("the cut call's error: %v, want UNAVAILABLE", err)
			}
		})
	}
}

// Issue 14, streaming: a server stream in flight at stop either finishes
// within the drain's bound or is cut and reported, and the stop never
// outlives its ctx deadline.
func TestServerStreamInFlightAtStopFinishesOrIsCut(t *testing.T) {
	t.Run("a stream that ends within the bound finishes", func(t *testing.T) {
		n := startNode(t, &callsServer{ticks: func(_ context.Context, send func(string) error) error {
			for range 10 {
				time.Sleep(50 * time.Millisecond)
				if err := send("tick"); err != nil {
					return err
				}
			}
			return nil
		}}, shutdown.Config{DrainTimeout: 4 * time.Second})
		cc := dial(t, n.addr)
		s, err := ticks(context.Background(), cc)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			t.Fatal(err)
		}
		got := make(chan int, 1)
		go func() {
			k := 1
			for s.RecvMsg(new(wrapperspb.StringValue)) == nil {
				k++
			}
			got <- k
		}()
		if err := n.stop(t, 10*time.Second); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if r := n.seq.Report(); r.CutByDrain != 0 || r.InFlightAtDrain != 1 {
			t.Errorf("Report: in flight at the drain %d, cut %d; want 1 and 0", r.InFlightAtDrain, r.CutByDrain)
		}
		if k := <-got; k != 10 {
			t.Errorf("the client got %d of 10 messages", k)
		}
		if err := s.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
			t.Errorf("the stream ended with %v, want io.EOF (status OK)", err)
		}
	})

	t.Run("a stream that outlives the bound is cut and reported", func(t *testing.T) {
		release, ended := make(chan struct{}), make(chan struct{})
		n := startNode(t, &callsServer{ticks: func(_ context.Context, send func(string) error) error {
			defer close(ended)
			for { // ignores its ctx and send errors until released
				select {
				case <-release:
					return nil
				case <-time.After(20 * time.Millisecond):
					_ = send("tick")
				}
			}
		}}, shutdown.Config{DrainTimeout: 500 * time.Millisecond})
		defer func() { close(release); <-ended }()
		cc := dial(t, n.addr)
		s, err := ticks(context.Background(), cc)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			t.Fatal(err)
		}
		stopErr := n.stop(t, 5*time.Second)
		var de *shutdown.DrainError
		if !errors.As(stopErr, &de) || de.Cut != 1 {
			t.Errorf("Stop: %v; want a *shutdown.DrainError with Cut 1", stopErr)
		}
		if r := n.seq.Report(); r.CutByDrain != 1 {
			t.Errorf("Report.CutByDrain %d, want 1", r.CutByDrain)
		}
		for err == nil {
			err = s.RecvMsg(new(wrapperspb.StringValue))
		}
		if grpcstatus.Code(err) != codes.Unavailable {
			t.Errorf("the cut stream ended with %v, want UNAVAILABLE", err)
		}
	})
}

// Issue 14, item 4: health, reflection and channelz are not traffic.
func TestHealthIsNotTraffic(t *testing.T) {
	t.Run("a health-watching client does not hold the drain and sees NOT_SERVING, then a clean end", func(t *testing.T) {
		const drain = 4 * time.Second
		n := startNode(t, &callsServer{}, shutdown.Config{DrainTimeout: drain})
		// grpc-go's recommended client setup holds a Health/Watch stream.
		lb := dial(t, n.addr, grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":""}}`))
		lb.Connect()
		testutil.WaitFor(t, "the health-checked connection ready", func() bool { return lb.GetState().String() == "READY" })
		// And one Watch of our own, to see what it is told.
		w, err := healthpb.NewHealthClient(dial(t, n.addr)).Watch(context.Background(), &healthpb.HealthCheckRequest{Service: callsService})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := w.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("first Watch answer: %v, %v", r, err)
		}
		seen := make(chan []healthpb.HealthCheckResponse_ServingStatus, 1)
		end := make(chan error, 1)
		go func() {
			var got []healthpb.HealthCheckResponse_ServingStatus
			for {
				r, err := w.Recv()
				if err != nil {
					seen <- got
					end <- err
					return
				}
				got = append(got, r.Status)
			}
		}()
		if got := n.tracker.InFlight(); got != 0 {
			t.Errorf("%d call(s) in flight with only health watches open", got)
		}

		if err := n.stop(t, 15*time.Second); err != nil {
			t.Errorf("Stop: %v", err)
		}
		r := n.seq.Report()
		if r.Duration >= drain || r.CutByDrain != 0 {
			t.Errorf("the stop took %v (DrainTimeout %v) and cut %d; want well under the bound and 0", r.Duration, drain, r.CutByDrain)
		}
		if got := <-seen; len(got) == 0 || got[len(got)-1] != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("the Watch was told %v, want NOT_SERVING last", got)
		}
		if err := <-end; err != io.EOF {
			t.Errorf("the Watch ended with %v, want io.EOF (status OK)", err)
		}
		t.Logf("stop %v: %+v", r.Duration.Round(time.Millisecond), r.Steps)
	})

	t.Run("health probes do not reset the quiet window nor count after deregistration", func(t *testing.T) {
		n := startNode(t, &callsServer{}, shutdown.Config{})
		probe := healthpb.NewHealthClient(dial(t, n.addr))
		var (
			answered, during atomic.Int64
			stopping         atomic.Bool
			quit             = make(chan struct{})
			wg               sync.WaitGroup
		)
		wg.Go(func() {
			tick := time.NewTicker(100 * time.Millisecond) // as Kubernetes and Envoy probe
			defer tick.Stop()
			for {
				select {
				case <-quit:
					return
				case <-tick.C:
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := probe.Check(ctx, &healthpb.HealthCheckRequest{})
				cancel()
				if err == nil {
					answered.Add(1)
					if stopping.Load() {
						during.Add(1)
					}
				}
			}
		})
		testutil.WaitFor(t, "probes answered", func() bool { return answered.Load() >= 3 })
		stopping.Store(true)
		err := n.stop(t, 15*time.Second)
		close(quit)
		wg.Wait()
		if err != nil {
			t.Errorf("Stop: %v", err)
		}
		r := n.seq.Report()
		if !r.Quiesced || r.AfterDeregistration != 0 {
			t.Errorf("Report: quiesced %v, %d request(s) after deregistration; want true and 0 (probes answered during the stop: %d)", r.Quiesced, r.AfterDeregistration, during.Load())
		}
		if during.Load() == 0 {
			t.Error("no probe was answered during the stop; the test proved nothing")
		}
		if !n.tracker.LastArrival().IsZero() {
			t.Errorf("probes set the last arrival to %v", n.tracker.LastArrival())
		}
	})
}

func TestInfrastructureMethodsAreTheGRPCServices(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"/grpc.health.v1.Health/Check", true},
		{"/grpc.health.v1.Health/Watch", true},
		{"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", true},
		{"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", true},
		{"/grpc.channelz.v1.Channelz/GetTopChannels", true},
		{"/" + callsService + "/Hold", false},
		{"/grpc.healthy.Service/Check", false},
	}
	for _, tt := range tests {
		if got := grpcstop.Infrastructure(tt.give); got != tt.want {
			t.Errorf("Infrastructure(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}
