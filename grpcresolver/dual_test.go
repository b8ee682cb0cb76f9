package grpcresolver_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/shutdown/grpcstop"
)

// A provider serving HTTP and gRPC on two ports registers the HTTP one as
// its Port and the gRPC one in the metadata: the resolver hands grpc-go
// the gRPC one (it handed it the HTTP port, where every call failed).
func TestAProviderWithHTTPAndGRPCIsDialledOnItsGRPCPort(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	sess, err := sd.NewSession(zkc.ConnectString(), sd.SessionTimeout(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tracker := new(shutdown.Tracker)
	gs := grpc.NewServer(grpcstop.ServerOptions(tracker)...)
	testutil.RegisterQuotes(gs, "q1", time.Millisecond)
	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpPort := testutil.FreePort(t)
	p, err := provider.New(sess, provider.Config{
		Instance:     sd.Instance{Name: service, ID: "q1", Address: "127.0.0.1", Port: httpPort},
		Server:       &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second},
		Addr:         net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort)),
		GRPC:         gs,
		GRPCListener: grpcLn,
		Tracker:      tracker,
		QuietWindow:  50 * time.Millisecond,
	}, provider.WithRegistrarOptions(zkc.registrarOptions()...))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Stop(ctx)
	})

	b := newBuilder(t, startConsumer(t, zkc))
	rec, _ := build(t, b, "gracekit:///"+service)
	rec.waitIDs(t, "q1")
	states, _ := rec.snapshot()
	if got, want := states[len(states)-1].Addresses[0].Addr, grpcLn.Addr().String(); got != want {
		t.Fatalf("resolved %s, want the gRPC port %s", got, want)
	}
	cc := dial(t, b, "gracekit:///"+service)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if id, err := get(ctx, cc); err != nil || id != "q1" {
		t.Fatalf("call: %q, %v; want q1's answer", id, err)
	}
}
