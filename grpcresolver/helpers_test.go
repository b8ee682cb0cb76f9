package grpcresolver_test

import (
	"context"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/grpcresolver"
	"github.com/gracekit/gracekit/internal/assemblytest"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(zktest.SharedMain(m)) }

// zkEnv is a ZooKeeper server and the base path a test's nodes go under
// ("" for sd's default /services).
type zkEnv struct {
	*zktest.Cluster
	base string
}

// sharedZK is the test binary's shared server, with a base path no other
// test uses: tests on it never see each other's instances.
func sharedZK(t *testing.T) *zkEnv { return &zkEnv{zktest.Shared(t), zktest.UniquePath(t)} }

// ownZK is a server of the test's own, at the default base path, for a
// test that stops it.
func ownZK(t *testing.T) *zkEnv { return &zkEnv{Cluster: zktest.New(t)} }

func (z *zkEnv) basePath() []sd.SharedOption {
	if z.base == "" {
		return nil
	}
	return []sd.SharedOption{sd.BasePath(z.base)}
}

func (z *zkEnv) registrarOptions() (opts []sd.RegistrarOption) {
	for _, o := range z.basePath() {
		opts = append(opts, o)
	}
	return opts
}

func (z *zkEnv) instancerOptions() (opts []sd.InstancerOption) {
	for _, o := range z.basePath() {
		opts = append(opts, o)
	}
	return opts
}

// service is the discovery name of the test backends; quotesName their
// gRPC service.
const (
	service    = "quotes"
	quotesName = testutil.QuotesService
	// serviceConfig is the one the package documents.
	serviceConfig = `{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":""}}`
)

// backend is a real grpc.Server on a loopback listener, registered in
// ZooKeeper over a session of its own.
type backend struct {
	id   string
	port int
	reg  *sd.Registrar
}

func startBackend(t *testing.T, zkc *zkEnv, id string, metadata map[string]string) *backend {
	t.Helper()
	return startBackendSession(t, zkc, id, metadata, 4*time.Second)
}

// startBackendSession is startBackend whose registration's session lasts
// session.
func startBackendSession(t *testing.T, zkc *zkEnv, id string, metadata map[string]string, session time.Duration) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	testutil.RegisterQuotes(srv, id, time.Millisecond)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-served })

	client, err := sd.NewClient(zkc.ConnectString(), sd.SessionTimeout(session))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	port := ln.Addr().(*net.TCPAddr).Port
	reg, err := sd.NewRegistrar(client, sd.Instance{Name: service, ID: id, Address: "127.0.0.1", Port: port, Metadata: metadata},
		zkc.registrarOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLimit)
	defer cancel()
	if err := reg.RegisterContext(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = reg.DeregisterContext(ctx)
	})
	return &backend{id: id, port: port, reg: reg}
}

// startConsumer is a started consumer over a session of its own, reading
// zkc's base path; it stops when the test ends.
func startConsumer(t *testing.T, zkc *zkEnv) *consumer.Consumer {
	t.Helper()
	sess, err := sd.NewSession(zkc.ConnectString(), sd.SessionTimeout(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if zkc.base == "" {
		return assemblytest.StartConsumer(t, sess)
	}
	c, err := consumer.New(sess, consumer.WithInstancerOptions(zkc.instancerOptions()...))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

func newBuilder(t *testing.T, c *consumer.Consumer, opts ...grpcresolver.Option) *grpcresolver.Builder {
	t.Helper()
	b, err := grpcresolver.NewBuilder(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dial is a grpc-go client as the package documents it: the Builder,
// round_robin and client health checking. It closes when the test ends.
func dial(t *testing.T, b *grpcresolver.Builder, target string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(target,
		grpc.WithResolvers(b),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// get calls Quotes/Get and returns the id of the instance that served it.
func get(ctx context.Context, cc *grpc.ClientConn) (string, error) {
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, "/"+quotesName+"/Get", wrapperspb.String("x"), out)
	return out.GetValue(), err
}

// waitServedBy waits until a round of calls is served by exactly the
// instances want, each of them, no other, and no call failed.
func waitServedBy(t *testing.T, cc *grpc.ClientConn, want ...string) {
	t.Helper()
	slices.Sort(want)
	testutil.WaitFor(t, "calls served by exactly "+strings.Join(want, ","), func() bool {
		seen := map[string]bool{}
		for range 10 * len(want) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			id, err := get(ctx, cc)
			cancel()
			if err != nil {
				return false
			}
			seen[id] = true
		}
		got := make([]string, 0, len(seen))
		for id := range seen {
			got = append(got, id)
		}
		slices.Sort(got)
		return slices.Equal(got, want)
	})
}

// recorder is a resolver.ClientConn that keeps what a resolver tells it.
// Like grpc-go's with round_robin, it refuses an empty set with
// balancer.ErrBadResolverState (and keeps it, as grpc-go does).
type recorder struct {
	resolver.ClientConn // not implemented: calling the rest panics

	mu     sync.Mutex
	states []resolver.State
	at     []time.Time // when each state came
	errs   []error
}

func (r *recorder) UpdateState(s resolver.State) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, s)
	r.at = append(r.at, time.Now())
	if len(s.Endpoints) == 0 {
		return balancer.ErrBadResolverState
	}
	return nil
}

func (r *recorder) ReportError(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

// snapshot returns the states and errors so far.
func (r *recorder) snapshot() ([]resolver.State, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.states), slices.Clone(r.errs)
}

// stateAt is when state i came.
func (r *recorder) stateAt(i int) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at[i]
}

// ids is the instance ids of the last state, sorted; ok is false before the first.
func (r *recorder) ids() (ids []string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.states) == 0 {
		return nil, false
	}
	for _, a := range r.states[len(r.states)-1].Addresses {
		inst, _ := grpcresolver.InstanceFromAddress(a)
		ids = append(ids, inst.ID)
	}
	slices.Sort(ids)
	return ids, true
}

func (r *recorder) waitIDs(t *testing.T, want ...string) {
	t.Helper()
	slices.Sort(want)
	testutil.WaitFor(t, "resolver state "+strings.Join(want, ","), func() bool {
		ids, ok := r.ids()
		return ok && slices.Equal(ids, want)
	})
}

func target(t *testing.T, raw string) resolver.Target {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return resolver.Target{URL: *u}
}

// build builds a resolver for raw with a recorder, closed when the test ends.
func build(t *testing.T, b *grpcresolver.Builder, raw string) (*recorder, resolver.Resolver) {
	t.Helper()
	rec := &recorder{}
	r, err := b.Build(target(t, raw), rec, resolver.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return rec, r
}
