package provider_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/shutdown/grpcstop"
)

// A service that serves gRPC and HTTP on two ports is one provider: one
// registration (the gRPC port in its metadata), one stop that drains both.
func TestOneProviderServesHTTPAndGRPCWithOneRegistration(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	conn := testutil.ZKConn(t, zkc.Addrs())
	sess, err := sd.NewSession(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	tracker := new(shutdown.Tracker)
	gs := grpc.NewServer(grpcstop.ServerOptions(tracker)...)
	testutil.RegisterEcho(gs, "echo:")
	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") })
	httpPort := testutil.FreePort(t)
	p, err := provider.New(sess, provider.Config{
		Instance:     sd.Instance{Name: "both", ID: "b1", Address: "127.0.0.1", Port: httpPort},
		Server:       &http.Server{Handler: mux, ReadHeaderTimeout: time.Second},
		Addr:         net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort)),
		GRPC:         gs,
		GRPCListener: grpcLn,
		Tracker:      tracker,
		QuietWindow:  50 * time.Millisecond,
	}, zkc.registrar())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	children, _, err := conn.Children(zkc.base + "/both")
	if err != nil || len(children) != 1 {
		t.Fatalf("registrations: %v (%v), want one", children, err)
	}
	data, _, err := conn.Get(zkc.path("both", "b1"))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := sd.CuratorCodec{}.Decode("both", "b1", data)
	if err != nil {
		t.Fatal(err)
	}
	grpcPort := grpcLn.Addr().(*net.TCPAddr).Port
	if inst.Port != httpPort || inst.Metadata[sd.MetadataGRPCPort] != strconv.Itoa(grpcPort) {
		t.Fatalf("registered port %d and %s=%q, want %d and %d", inst.Port, sd.MetadataGRPCPort, inst.Metadata[sd.MetadataGRPCPort], httpPort, grpcPort)
	}
	if got := p.GRPCAddr().String(); got != grpcLn.Addr().String() {
		t.Fatalf("GRPCAddr %s, want %s", got, grpcLn.Addr())
	}

	cc, err := grpc.NewClient(grpcLn.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if got, err := testutil.Say(ctx, cc, "hi"); err != nil || got != "echo:hi" {
		t.Fatalf("gRPC call: %q, %v", got, err)
	}
	hc := healthpb.NewHealthClient(cc)
	for _, svc := range []string{"", "gracekit.test.Echo"} {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q: %v, %v, want SERVING", svc, r.GetStatus(), err)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+p.Addr().String()+"/hello", nil)
	if resp := testutil.Do(t, req); resp.StatusCode != http.StatusOK {
		t.Fatalf("/hello = %d", resp.StatusCode)
	}
	if tracker.LastArrival().IsZero() {
		t.Fatal("the gRPC call was not counted in the Tracker")
	}

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.Stop(stopCtx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if ok, _, _ := conn.Exists(zkc.path("both", "b1")); ok {
		t.Fatal("still registered after Stop")
	}
	for _, addr := range []string{grpcLn.Addr().String(), p.Addr().String()} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			t.Fatalf("%s still accepts after Stop", addr)
		}
	}
}

// gRPC without the Tracker its interceptors count in, or with a health
// service of its own, is refused at New with what to do.
func TestAGRPCServerIsCheckedAtNew(t *testing.T) {
	sess, err := sd.NewSession("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	inst := sd.Instance{Name: "q", Address: "127.0.0.1", Port: 9090}
	if _, err := provider.New(sess, provider.Config{Instance: inst, GRPC: grpc.NewServer()}); err == nil || !strings.Contains(err.Error(), "Tracker") {
		t.Fatalf("GRPC without Tracker: %v, want an error naming Config.Tracker", err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	if _, err := provider.New(sess, provider.Config{Instance: inst, GRPC: gs, Tracker: new(shutdown.Tracker)}); err == nil || !strings.Contains(err.Error(), "health") {
		t.Fatalf("GRPC with its own health service: %v, want an error", err)
	}
	both := provider.Config{Instance: inst, Server: &http.Server{ReadHeaderTimeout: time.Second}, GRPC: grpc.NewServer(), Tracker: new(shutdown.Tracker), GRPCAddr: ":0"}
	if _, err := provider.New(sess, both); err == nil || !strings.Contains(err.Error(), "GRPCAddr") {
		t.Fatalf("GRPCAddr without a port: %v, want an error naming it", err)
	}
}
