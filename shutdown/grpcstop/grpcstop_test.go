package grpcstop_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/endpoint/grpcfactory"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/shutdown/grpcstop"
	"github.com/gracekit/gracekit/zktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serviceName is the test providers' gRPC service (testutil.RegisterQuotes):
// Get answers the id of the instance that served it.
const serviceName = testutil.QuotesService

type provider struct {
	seq    *shutdown.Sequence
	health *health.Server
	ready  *shutdown.Readiness
	stopHS func()
}

func startProvider(t *testing.T, zkc *zktest.Cluster, id string) *provider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	client, err := sd.NewClient(zkc.ConnectString(), sd.SessionTimeout(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := sd.NewRegistrar(client, sd.Instance{Name: "quotes", ID: id, Address: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port})
	if err != nil {
		t.Fatal(err)
	}
	tracker, ready := &shutdown.Tracker{}, &shutdown.Readiness{}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpcstop.UnaryServerInterceptor(tracker)),
		grpc.ChainStreamInterceptor(grpcstop.StreamServerInterceptor(tracker)),
	)
	testutil.RegisterQuotes(srv, id, 2*time.Millisecond)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	p := &provider{health: hs, ready: ready, stopHS: grpcstop.Health(ready, hs, serviceName)}
	p.seq, err = shutdown.NewSequence(shutdown.Config{
		Registration: reg, Tracker: tracker, Readiness: ready,
		Server: grpcstop.Server(srv), Listener: ln,
		CloseSession: func(context.Context) error { client.Close(); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.seq.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = p.seq.Stop(ctx)
		p.stopHS()
	})
	return p
}

func status(t *testing.T, hs *health.Server, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	resp, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Status
}

// Issue 10: a gRPC provider stopped under steady load through a gracekit
// consumer (Instancer, Endpointer with one ClientConn per instance,
// round robin, retry) fails no call; its health turns NOT_SERVING at the
// stop's first step and its calls are drained.
func TestStoppingAGRPCProviderUnderLoadFailsNoCall(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t)
	p1 := startProvider(t, zkc, "q1")
	startProvider(t, zkc, "q2")
	if got := status(t, p1.health, serviceName); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health of a ready provider: %v", got)
	}

	client, err := sd.NewClient(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	in, err := sd.NewInstancerContext(context.Background(), client, "quotes")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Stop()
	f, err := grpcfactory.New(serviceName, "Get",
		func(_ context.Context, req any) (any, error) { return wrapperspb.String(req.(string)), nil },
		func(_ context.Context, resp any) (any, error) { return resp.(*wrapperspb.StringValue).GetValue(), nil },
		wrapperspb.StringValue{})
	if err != nil {
		t.Fatal(err)
	}
	eps, err := endpoint.NewEndpointer(in, f.Factory)
	if err != nil {
		t.Fatal(err)
	}
	defer eps.Close()
	rr, err := endpoint.NewRoundRobin(eps)
	if err != nil {
		t.Fatal(err)
	}
	call, err := endpoint.NewRetry(rr, endpoint.Attempts(3))
	if err != nil {
		t.Fatal(err)
	}

	load := testutil.StartLoad(8, func(ctx context.Context) (string, error) {
		resp, err := call(ctx, "ABC")
		if err != nil {
			return "", err
		}
		return resp.(string), nil
	})
	defer load.Stop()
	testutil.WaitFor(t, "both providers answering", func() bool {
		return load.Served("q1") > 20 && load.Served("q2") > 20
	})

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	stopErr := p1.seq.Stop(ctx)
	cancel()
	if got := status(t, p1.health, serviceName); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health after the stop: %v", got)
	}
	after := load.Served("q2")
	testutil.WaitFor(t, "q2 still answering", func() bool { return load.Served("q2") > after+50 })
	load.Stop()

	if stopErr != nil {
		t.Errorf("Stop: %v", stopErr)
	}
	if r := p1.seq.Report(); r.CutByDrain != 0 {
		t.Errorf("the drain cut %d call(s)", r.CutByDrain)
	}
	if n := load.Failed(); n != 0 {
		t.Fatalf("%d of %d calls failed during the stop; first: %v", n, n+load.Answered(), load.FirstErr())
	}
	t.Logf("%d calls, none failed; q1 served %d, q2 %d", load.Answered(), load.Served("q1"), load.Served("q2"))
}

// The closing signal reaches the consumer in the response metadata once
// the provider is draining, and the Endpointer stops picking it.
func TestTheClosingSignalTravelsInResponseMetadata(t *testing.T) {
	tracker := &shutdown.Tracker{}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(grpcstop.UnaryServerInterceptor(tracker)))
	testutil.RegisterQuotes(srv, "solo", 2*time.Millisecond)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	f, err := grpcfactory.New(serviceName, "Get",
		func(_ context.Context, req any) (any, error) { return wrapperspb.String(req.(string)), nil },
		func(_ context.Context, resp any) (any, error) { return resp.(*wrapperspb.StringValue).GetValue(), nil },
		wrapperspb.StringValue{})
	if err != nil {
		t.Fatal(err)
	}
	ep, closer, err := f.Factory(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	reporter := closer.(endpoint.ClosingReporter)
	if _, err := ep(context.Background(), "x"); err != nil || reporter.Closing() {
		t.Fatalf("before draining: err %v, closing %v", err, reporter.Closing())
	}
	tracker.StartDraining()
	if _, err := ep(context.Background(), "x"); err != nil || !reporter.Closing() {
		t.Fatalf("while draining: err %v, closing %v", err, reporter.Closing())
	}
	srv.Stop()
	_, err = ep(context.Background(), "x")
	// Sent on the dying connection it is Retryable; refused by the
	// stopped server's port, NotSent.
	if c := endpoint.Classify(err); !errors.Is(err, endpoint.ErrUnavailable) || c != endpoint.Retryable && c != endpoint.NotSent {
		t.Fatalf("a stopped server's error %v: Is(ErrUnavailable) %v, class %v", err, errors.Is(err, endpoint.ErrUnavailable), c)
	}
}
