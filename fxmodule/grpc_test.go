package fxmodule_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
)

func newGRPCServer(o fxmodule.GRPCServerOptions) *grpc.Server {
	s := grpc.NewServer(o...)
	testutil.RegisterEcho(s, "")
	return s
}

// Discovery serves an app that provides only a *grpc.Server in one line:
// registered at GRPCPort, health following readiness, calls counted.
func TestDiscoveryServesAGRPCOnlyApp(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	conn := testutil.ZKConn(t, zkc.Addrs())
	cfg := providerConfig(zkc, "grpc-1", 0)
	cfg.GRPCPort = testutil.FreePort(t)
	var p *provider.Provider
	app := fxtest.New(t, fx.Supply(cfg), fx.Provide(newGRPCServer), fxmodule.Discovery, fx.Populate(&p))
	app.RequireStart()
	data, _, err := conn.Get(zkc.path("quote", "grpc-1"))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := sd.CuratorCodec{}.Decode("quote", "grpc-1", data)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Port != cfg.GRPCPort || inst.Metadata[sd.MetadataGRPCPort] != strconv.Itoa(cfg.GRPCPort) {
		t.Fatalf("registered port %d, %s=%q; want %d", inst.Port, sd.MetadataGRPCPort, inst.Metadata[sd.MetadataGRPCPort], cfg.GRPCPort)
	}
	cc, err := grpc.NewClient(net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.GRPCPort)), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if got, err := testutil.Say(ctx, cc, "hi"); err != nil || got != "hi" {
		t.Fatalf("call: %q, %v", got, err)
	}
	if r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", r.GetStatus(), err)
	}
	app.RequireStop()
	if exists(t, conn, zkc.path("quote", "grpc-1")) {
		t.Fatal("registered after stop")
	}
	if r := p.Report(); r.Err != nil || r.AfterDeregistration != 0 {
		t.Fatalf("stop report: err %v, %d after deregistration", r.Err, r.AfterDeregistration)
	}
}

// A *grpc.Server without Config.GRPCPort is a ConfigError.
func TestAGRPCAppWithoutGRPCPortIsAConfigError(t *testing.T) {
	cfg := fxmodule.Config{ZKServers: "127.0.0.1:2181", Service: "quote", Address: "127.0.0.1"}
	err := fx.New(fx.NopLogger, fx.Supply(cfg), fx.Provide(newGRPCServer), fxmodule.Discovery).Err()
	configErr(t, err, "GRPCPort")
}

// An app with both servers is one registration: the HTTP port, and the
// gRPC port in its metadata; one stop ends both.
func TestDiscoveryServesHTTPAndGRPCAsOneInstance(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	conn := testutil.ZKConn(t, zkc.Addrs())
	port := testutil.FreePort(t)
	cfg := providerConfig(zkc, "both-1", port)
	cfg.GRPCPort = testutil.FreePort(t)
	app := fxtest.New(t, fx.Supply(cfg), fx.Provide(helloServer, newGRPCServer), fxmodule.Discovery)
	app.RequireStart()
	children, _, err := conn.Children(zkc.services() + "/quote")
	if err != nil || len(children) != 1 {
		t.Fatalf("registrations %v (%v), want one", children, err)
	}
	data, _, err := conn.Get(zkc.path("quote", "both-1"))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := sd.CuratorCodec{}.Decode("quote", "both-1", data)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Port != port || inst.Metadata[sd.MetadataGRPCPort] != strconv.Itoa(cfg.GRPCPort) {
		t.Fatalf("registered port %d, %s=%q; want %d and %d", inst.Port, sd.MetadataGRPCPort, inst.Metadata[sd.MetadataGRPCPort], port, cfg.GRPCPort)
	}
	if code, _ := get(t, "http://127.0.0.1:"+strconv.Itoa(port)+"/hello"); code != 200 {
		t.Fatalf("/hello: %d", code)
	}
	app.RequireStop()
	for _, p := range []int{port, cfg.GRPCPort} {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), time.Second); err == nil {
			_ = c.Close()
			t.Fatalf("port %d still accepts after stop", p)
		}
	}
}
