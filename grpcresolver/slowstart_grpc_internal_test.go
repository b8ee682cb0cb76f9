package grpcresolver

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/internal/testutil"
)

// countingServer is a real gRPC server on a loopback listener that counts
// the calls it serves.
type countingServer struct {
	addr  string
	calls atomic.Int64
}

func startCounting(t *testing.T) *countingServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingServer{addr: lis.Addr().String()}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		cs.calls.Add(1)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return cs
}

// The service config selects the balancer; an address that joins after
// the first resolver update gets a small share at first, those of the
// first update equal shares at once. The window is long, so nothing
// changes while the test runs: it counts, it does not time.
func TestSlowStartBalancerOverRealServers(t *testing.T) {
	a, b, c := startCounting(t), startCounting(t), startCounting(t)
	now := time.Now()
	r := manual.NewBuilderWithScheme("slowstarttest")
	r.InitialState(resolver.State{Addresses: []resolver.Address{
		addrOf(a.addr, now.Add(-time.Second), nil), addrOf(b.addr, now.Add(-time.Second), nil),
	}})
	cc, err := grpc.NewClient(r.Scheme()+":///quote",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(ServiceConfig(endpoint.SlowStart{Window: time.Hour, Aggression: 1, MinWeight: 0.1})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	// A bound per call, not one for all 2,900: under the race detector on
	// a loaded machine they took over 30 s together.
	callN := func(n int) {
		t.Helper()
		for range n {
			ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLimit)
			_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// Wait until both first addresses serve, then count.
	for a.calls.Load() == 0 || b.calls.Load() == 0 {
		callN(1)
	}
	a.calls.Store(0)
	b.calls.Store(0)
	callN(400)
	if ga, gb := a.calls.Load(), b.calls.Load(); ga < 190 || gb < 190 {
		t.Fatalf("the first update's addresses got %d and %d of 400 calls, want about 200 each", ga, gb)
	}
	r.UpdateState(resolver.State{Addresses: []resolver.Address{
		addrOf(a.addr, now.Add(-time.Second), nil), addrOf(b.addr, now.Add(-time.Second), nil), addrOf(c.addr, time.Now(), nil),
	}})
	for c.calls.Load() == 0 { // c is ready and picked
		callN(1)
	}
	a.calls.Store(0)
	b.calls.Store(0)
	c.calls.Store(0)
	callN(2100)
	// Weights 1, 1 and 0.1: c gets about 100 of 2,100 calls.
	if gc := c.calls.Load(); gc > 200 || gc < 30 {
		t.Fatalf("the joining address got %d of 2100 calls, want about 100 (a %d, b %d)", gc, a.calls.Load(), b.calls.Load())
	}
}
