package provider_test

import (
	"context"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gracekit/gracekit/grpcresolver"
	"github.com/gracekit/gracekit/internal/assemblytest"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/shutdown/grpcstop"
	"github.com/gracekit/gracekit/zktest"
)

// recordingBuilder hands grpcresolver's resolvers a ClientConn that calls
// pushed with each set once grpc-go took it (UpdateState returned: the
// balancer built its picker from it).
type recordingBuilder struct {
	resolver.Builder
	pushed func(ids []string)
}

func (b recordingBuilder) Build(t resolver.Target, cc resolver.ClientConn, o resolver.BuildOptions) (resolver.Resolver, error) {
	return b.Builder.Build(t, recordingCC{cc, b.pushed}, o)
}

type recordingCC struct {
	resolver.ClientConn
	pushed func(ids []string)
}

func (c recordingCC) UpdateState(s resolver.State) error {
	err := c.ClientConn.UpdateState(s)
	var ids []string
	for _, e := range s.Endpoints {
		if inst, ok := grpcresolver.InstanceFromEndpoint(e); ok {
			ids = append(ids, inst.ID)
		}
	}
	c.pushed(ids)
	return err
}

// startGRPCProvider is a gRPC-only provider of quote whose Quotes calls
// (not its health service's) count in calls, over sess.
func startGRPCProvider(t *testing.T, sess *sd.Session, id string, calls *atomic.Int64, health provider.HealthCheck) *provider.Provider {
	t.Helper()
	tracker := new(shutdown.Tracker)
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if info.FullMethod == "/"+testutil.QuotesService+"/Get" {
			calls.Add(1)
		}
		return h(ctx, req)
	}
	gs := grpc.NewServer(append(grpcstop.ServerOptions(tracker), grpc.ChainUnaryInterceptor(count))...)
	testutil.RegisterQuotes(gs, id, 2*time.Millisecond)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return assemblytest.StartProvider(t, sess, provider.Config{
		Instance:     sd.Instance{Name: "quote", ID: id, Address: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port},
		GRPC:         gs,
		GRPCListener: ln,
		Tracker:      tracker,
		Health:       health,
		QuietWindow:  100 * time.Millisecond,
	})
}

// Issue 22, for a grpc-go client through grpcresolver (gracekit:///quote,
// the service config the package documents): gracekit drain, the CLI an
// operator runs, takes a gRPC provider out under load. grpc-go has no
// flush to acknowledge, so the bound that holds is the resolver's: no RPC
// the client starts after grpcresolver pushed the set without the
// instance reaches it (the drain turns its gRPC health NOT_SERVING too,
// which the client's health check may see first). None fails; no set
// with it is pushed while it is drained, through an expiry of its
// session that re-creates its node; gracekit undrain brings it back.
func TestAnOperatorDrainHoldsAGRPCClientOff(t *testing.T) {
	t.Parallel()
	zkc := ownZK(t)
	cli := testutil.BuildCLI(t)
	conn := testutil.ZKConn(t, zkc.Addrs())

	sess2, err := sd.NewSession(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	var calls1, calls2, checks atomic.Int64
	startGRPCProvider(t, sess2, "p2", &calls2, provider.HealthCheck{})
	rec := zktest.NewSessionRecorder()
	sess1, err := sd.NewSession(zkc.ConnectString(), sd.SessionTimeout(4*time.Second), sd.Dialer(rec.Dial))
	if err != nil {
		t.Fatal(err)
	}
	p1 := startGRPCProvider(t, sess1, "p1", &calls1, provider.HealthCheck{
		Check:    func(context.Context) error { checks.Add(1); return nil },
		Interval: 20 * time.Millisecond, Timeout: instantCheckTimeout, Passes: 1, Hold: time.Millisecond})
	p1Addr := p1.GRPCAddr().String()
	path := "/services/quote/p1"

	// What the client's resolver pushed: out once a set without p1 was
	// taken after the drain; resurrected counts sets with p1 pushed after
	// that, until the undrain.
	var draining, out, undraining atomic.Bool
	var resurrected atomic.Int64
	pushed := func(ids []string) {
		has := slices.Contains(ids, "p1")
		switch {
		case undraining.Load():
		case out.Load() && has:
			resurrected.Add(1)
		case draining.Load() && !has:
			out.Store(true)
		}
	}
	csess, err := sd.NewSession(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	b, err := grpcresolver.NewBuilder(assemblytest.StartConsumer(t, csess))
	if err != nil {
		t.Fatal(err)
	}
	// RPCs started once out was set must not reach p1; those started
	// before may still be on their way: before counts them in flight.
	var before, late atomic.Int64
	track := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		after := out.Load()
		if !after {
			before.Add(1)
			defer before.Add(-1)
		}
		var pr peer.Peer
		err := invoke(ctx, method, req, reply, cc, append(opts, grpc.Peer(&pr))...)
		if after && pr.Addr != nil && pr.Addr.String() == p1Addr {
			late.Add(1)
		}
		return err
	}
	cc, err := grpc.NewClient("gracekit:///quote",
		grpc.WithResolvers(recordingBuilder{b, pushed}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":""}}`),
		grpc.WithChainUnaryInterceptor(track))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() }) // before the consumer stops
	load := testutil.StartLoad(4, func(ctx context.Context) (string, error) {
		reply := new(wrapperspb.StringValue)
		err := cc.Invoke(ctx, "/"+testutil.QuotesService+"/Get", wrapperspb.String("ABC"), reply)
		return reply.GetValue(), err
	})
	defer load.Stop()
	testutil.WaitFor(t, "p1 and p2 serving", func() bool { return load.Served("p1") > 20 && load.Served("p2") > 20 })

	draining.Store(true)
	cli.Run(t, "drain", "quote", "p1", "-zk", zkc.ConnectString())
	testutil.WaitFor(t, "the resolver pushed the set without p1", out.Load)
	var lastHealth []provider.HealthTransition
	defer func() {
		if t.Failed() {
			t.Logf("p1's health transitions: %+v", lastHealth)
		}
	}()
	testutil.WaitFor(t, "p1 out of rotation by the operator", func() bool {
		h := p1.Health()
		lastHealth = h
		return len(h) == 1 && !h[0].Healthy && h[0].By == provider.ByOperator
	})
	testutil.WaitFor(t, "the RPCs started before the push answered", func() bool { return before.Load() == 0 })
	held := calls1.Load()
	c := checks.Load()
	testutil.WaitFor(t, "ten passing health checks and 100 RPCs", func() bool {
		return checks.Load() > c+10 && calls2.Load() > 100
	})
	if inst, _ := nodeOf(t, conn, path); inst.Status() != sd.StatusOutOfService || inst.Metadata[sd.MetadataDrainedBy] != sd.DrainedByOperator {
		t.Fatalf("node while drained: %+v", inst.Metadata)
	}

	// An expiry of p1's session: its node is re-created, still drained,
	// and the client's resolver reads it so.
	_, stat := nodeOf(t, conn, path)
	id := rec.LastSession()
	expired := false
	for _, a := range zkc.Addrs() {
		if rec.Expire(a, id) == nil {
			expired = true
		}
	}
	if !expired {
		t.Fatal("no server expired p1's session")
	}
	testutil.WaitFor(t, "p1's node re-created in a new session", func() bool {
		_, st := nodeOf(t, conn, path)
		return st != nil && st.Czxid != stat.Czxid
	})
	if inst, _ := nodeOf(t, conn, path); inst.Status() != sd.StatusOutOfService || inst.Metadata[sd.MetadataDrainedBy] != sd.DrainedByOperator {
		t.Fatalf("node re-created after the expiry: %+v, want still drained", inst.Metadata)
	}
	n2 := calls2.Load()
	testutil.WaitFor(t, "100 RPCs after the re-creation", func() bool { return calls2.Load() > n2+100 })
	if n := calls1.Load() - held; n != 0 {
		t.Fatalf("p1 got %d RPCs while drained, after the RPCs started before the resolver's push answered", n)
	}
	if n := late.Load(); n != 0 {
		t.Fatalf("%d RPCs started after the resolver pushed the set without p1 reached it", n)
	}
	if n := resurrected.Load(); n != 0 {
		t.Fatalf("the resolver pushed p1 %d times while it was drained", n)
	}

	undraining.Store(true)
	cli.Run(t, "undrain", "quote", "p1", "-zk", zkc.ConnectString())
	testutil.WaitFor(t, "p1 UP again", func() bool {
		inst, _ := nodeOf(t, conn, path)
		return inst.Status() == sd.StatusUp && inst.Metadata[sd.MetadataDrainedBy] == ""
	})
	testutil.WaitFor(t, "p1 back by the operator", func() bool {
		h := p1.Health()
		return len(h) == 2 && h[1].Healthy && h[1].By == provider.ByOperator
	})
	testutil.WaitFor(t, "p1 gets RPCs again", func() bool { return calls1.Load() > held+20 })
	load.Stop()
	if n := load.Failed(); n != 0 {
		t.Fatalf("%d RPCs failed; first: %v", n, load.FirstErr())
	}
}
