package grpcresolver_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/shutdown/grpcstop"
)

// startStoppable is a gracekit gRPC provider: grpcstop's interceptors and
// health in a shutdown.Sequence that registers it in ZooKeeper.
func startStoppable(t *testing.T, zkc *zkEnv, id string) *shutdown.Sequence {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	client, err := sd.NewClient(zkc.ConnectString(), sd.SessionTimeout(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := sd.NewRegistrar(client, sd.Instance{Name: service, ID: id, Address: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port},
		zkc.registrarOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	tracker, ready := &shutdown.Tracker{}, &shutdown.Readiness{}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpcstop.UnaryServerInterceptor(tracker)),
		grpc.ChainStreamInterceptor(grpcstop.StreamServerInterceptor(tracker)),
	)
	testutil.RegisterQuotes(srv, id, time.Millisecond)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	stopHS := grpcstop.Health(ready, hs, quotesName)
	seq, err := shutdown.NewSequence(shutdown.Config{
		Registration: reg, Tracker: tracker, Readiness: ready,
		Server: grpcstop.Server(srv), Listener: ln,
		QuietWindow:  100 * time.Millisecond,
		CloseSession: func(context.Context) error { client.Close(); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := seq.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = seq.Stop(ctx)
		stopHS()
	})
	return seq
}

// A gracekit gRPC provider stopped under load, called through the resolver
// with round_robin and client health checking (a plain grpc-go client,
// no retries), fails no call, and its stop returns before its deadline.
func TestStoppingAGRPCProviderUnderLoadThroughTheResolverFailsNoCall(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	p1 := startStoppable(t, zkc, "q1")
	startStoppable(t, zkc, "q2")
	cc := dial(t, newBuilder(t, startConsumer(t, zkc)), "gracekit:///quotes")
	waitServedBy(t, cc, "q1", "q2")

	load := testutil.StartLoad(8, func(ctx context.Context) (string, error) { return get(ctx, cc) })
	defer load.Stop()
	testutil.WaitFor(t, "both providers answering under load", func() bool {
		return load.Served("q1") > 50 && load.Served("q2") > 50
	})

	const bound = 15 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	start := time.Now()
	stopErr := p1.Stop(ctx)
	took := time.Since(start)
	deadlineErr := ctx.Err()
	cancel()
	after := load.Served("q2")
	testutil.WaitFor(t, "q2 still answering", func() bool { return load.Served("q2") > after+50 })
	load.Stop()

	if deadlineErr != nil {
		t.Errorf("the stop returned after its %v deadline (took %v)", bound, took)
	}
	// The sequence's own errors and report are grpcstop's to assert; here
	// what counts is the calls.
	t.Logf("Stop took %v: %v; report %+v", took, stopErr, p1.Report())
	if n := load.Failed(); n != 0 {
		t.Fatalf("%d of %d calls failed during the stop; first: %v", n, n+load.Answered(), load.FirstErr())
	}
	t.Logf("%d calls, none failed; q1 served %d, q2 %d", load.Answered(), load.Served("q1"), load.Served("q2"))
}
