package fxmodule_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	"github.com/go-zookeeper/zk"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"

	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/shutdown/flush"
	"github.com/gracekit/gracekit/zktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "0123456789abcdef-shared-secret"

// get fetches url without keeping connections, and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func exists(t *testing.T, conn *zk.Conn, path string) bool {
	t.Helper()
	ok, _, err := conn.Exists(path)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func helloServer() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") })
	return &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}
}

func providerConfig(zkc *zktest.Cluster, id string, port int) fxmodule.Config {
	return fxmodule.Config{
		ZKServers:    zkc.ConnectString(),
		Service:      "quote",
		InstanceID:   id,
		Address:      "127.0.0.1",
		Port:         port,
		QuietWindow:  50 * time.Millisecond,
		MaxQuiesce:   time.Second,
		DrainTimeout: time.Second,
	}
}

func TestDiscoveryRegistersServesAndStopsCleanly(t *testing.T) {
	zkc := zktest.New(t)
	port := testutil.FreePort(t)
	cfg := providerConfig(zkc, "quote-1", port)
	opts := fx.Options(
		fx.Supply(cfg),
		fx.Provide(helloServer),
		fxmodule.Discovery,
	)
	if err := fx.ValidateApp(opts, fx.Invoke(func(*shutdown.Sequence) {})); err != nil {
		t.Fatalf("ValidateApp: %v", err)
	}

	var (
		seq *shutdown.Sequence
		reg *sd.Registrar
		ins *fxmodule.Instancers
	)
	app := fxtest.New(t, opts, fx.Populate(&seq, &reg, &ins))
	conn := testutil.ZKConn(t, zkc.Addrs())
	if exists(t, conn, "/services/quote/quote-1") {
		t.Fatal("node exists before start")
	}
	app.RequireStart()

	if !exists(t, conn, "/services/quote/quote-1") {
		t.Fatal("node missing after start")
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	if code, body := get(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d %q, want 200", code, body)
	}
	if code, _ := get(t, base+"/livez"); code != http.StatusOK {
		t.Fatalf("/livez = %d, want 200", code)
	}
	if code, body := get(t, base+"/hello"); code != http.StatusOK || body != "hello" {
		t.Fatalf("/hello = %d %q, want 200 hello", code, body)
	}

	// The Instancer factory sees the instance over the same session.
	in, err := ins.Instancer("quote")
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the instancer lists quote-1", func() bool {
		l := in.Instances()
		return len(l) == 1 && l[0].ID == "quote-1" && l[0].Port == port
	})

	app.RequireStop()
	if exists(t, conn, "/services/quote/quote-1") {
		t.Fatal("node still there after stop")
	}
	rep := seq.Report()
	if rep.Err != nil {
		t.Fatalf("stop error: %v", rep.Err)
	}
	if len(rep.Flush) != 0 {
		t.Fatalf("flushed %d targets, want none", len(rep.Flush))
	}
	if _, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
		t.Fatal("server still accepts connections after stop")
	}
}

// echo is a factory whose endpoint answers with its instance string.
func echo(instance string) (kitendpoint.Endpoint, io.Closer, error) {
	return func(context.Context, any) (any, error) { return instance, nil }, nil, nil
}

func TestProviderStopFlushesTheGateway(t *testing.T) {
	zkc := zktest.New(t)
	gwPort, pPort := testutil.FreePort(t), testutil.FreePort(t)

	var (
		call     kitendpoint.Endpoint
		upstream *fxmodule.Upstreams
	)
	gateway := fxtest.New(t,
		fx.Supply(fxmodule.Config{
			ZKServers:   zkc.ConnectString(),
			Service:     "gateway",
			InstanceID:  "gateway-1",
			Address:     "127.0.0.1",
			Port:        gwPort,
			FlushSecret: secret,
			QuietWindow: 50 * time.Millisecond,
		}),
		fx.Provide(helloServer),
		fxmodule.Gateway,
		fx.Invoke(func(u *fxmodule.Upstreams) error {
			upstream = u
			var err error
			call, err = u.Endpoint("quote", echo)
			return err
		}),
	)
	gateway.RequireStart()
	defer gateway.RequireStop()

	conn := testutil.ZKConn(t, zkc.Addrs())
	data, _, err := conn.Get("/services/gateway/gateway-1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"`+sd.MetadataFlushPath+`":"`+fxmodule.DefaultFlushPath+`"`) {
		t.Fatalf("gateway node lacks its flush path: %s", data)
	}
	if _, ok := upstream.Evicter("quote"); !ok {
		t.Fatal("no evicter for quote")
	}

	pcfg := providerConfig(zkc, "quote-1", pPort)
	pcfg.FlushSecret = secret
	pcfg.FlushGateways = []string{"gateway"}
	var seq *shutdown.Sequence
	provider := fxtest.New(t, fx.Supply(pcfg), fx.Provide(helloServer), fxmodule.Discovery, fx.Populate(&seq))
	provider.RequireStart()

	want := net.JoinHostPort("127.0.0.1", strconv.Itoa(pPort))
	testutil.WaitFor(t, "the gateway routes to the provider", func() bool {
		got, err := call(context.Background(), nil)
		return err == nil && got == want
	})

	// The Evicter acts at once, while ZooKeeper still lists the provider
	// as UP: no watch event can be what removes it here.
	ev, _ := upstream.Evicter("quote")
	if res, err := ev.Evict(context.Background(), flush.Request{Service: "quote", ID: "quote-1", Address: "127.0.0.1", Port: pPort}); err != nil || res != flush.Evicted {
		t.Fatalf("Evict: %v, %v; want evicted", res, err)
	}
	if got, err := call(context.Background(), nil); err == nil {
		t.Fatalf("the gateway routes to %v right after the eviction", got)
	}
	if !exists(t, conn, "/services/quote/quote-1") {
		t.Fatal("the provider's node is gone: the check above proved nothing")
	}

	provider.RequireStop()
	rep := seq.Report()
	if len(rep.Flush) != 1 || !rep.Flush[0].Acked {
		t.Fatalf("flush reports %+v, want one acked", rep.Flush)
	}
	if wantURL := "http://127.0.0.1:" + strconv.Itoa(gwPort) + fxmodule.DefaultFlushPath; rep.Flush[0].Target != wantURL {
		t.Fatalf("flush target %q, want %q", rep.Flush[0].Target, wantURL)
	}
	if !rep.Quiesced {
		t.Fatal("the quiesce did not end on its condition")
	}
	if _, err := call(context.Background(), nil); err == nil {
		t.Fatal("the gateway still routes to the stopped provider")
	}
}

func TestBadConfigFailsStart(t *testing.T) {
	zkc := zktest.New(t)
	good := func() fxmodule.Config { return providerConfig(zkc, "quote-1", 18080) }
	tests := []struct {
		name      string
		give      func(*fxmodule.Config)
		gateway   bool
		wantField string
	}{
		{"no ZooKeeper servers", func(c *fxmodule.Config) { c.ZKServers = "" }, false, "ZKServers"},
		{"no service", func(c *fxmodule.Config) { c.Service = "" }, false, "Service"},
		{"port out of range", func(c *fxmodule.Config) { c.Port = 70000 }, false, "Port"},
		{"flush gateways without a secret", func(c *fxmodule.Config) { c.FlushGateways = []string{"gateway"} }, false, "FlushSecret"},
		{"gateway without a secret", func(*fxmodule.Config) {}, true, "FlushSecret"},
		{"relative flush target", func(c *fxmodule.Config) { c.FlushSecret = secret; c.FlushTargets = []string{"gw:8080/flush"} }, false, "FlushTargets"},
		{"quiet window over max quiesce", func(c *fxmodule.Config) { c.QuietWindow = 3 * time.Second }, false, "QuietWindow"},
		{"stop timeout below the sequence's bounds", func(c *fxmodule.Config) { c.StopTimeout = 2 * time.Second }, false, "StopTimeout"},
		{"a service named ..", func(c *fxmodule.Config) { c.Service = ".." }, false, "Service"},
		{"metadata that sets the status", func(c *fxmodule.Config) { c.Metadata = map[string]string{sd.MetadataStatus: "DOWN"} }, false, "Metadata"},
		{"a flush path the probes use", func(c *fxmodule.Config) { c.FlushSecret = secret; c.FlushPath = "/readyz" }, true, "FlushPath"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good()
			tt.give(&cfg)
			module := fxmodule.Discovery
			if tt.gateway {
				module = fxmodule.Gateway
			}
			app := fx.New(fx.NopLogger, fx.Supply(cfg), fx.Provide(helloServer), module,
				fx.Invoke(func(*shutdown.Sequence) {}))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := app.Start(ctx)
			if err == nil {
				_ = app.Stop(ctx)
				t.Fatal("Start succeeded")
			}
			var ce *fxmodule.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Start error %v is not a *ConfigError", err)
			}
			if ce.Field != tt.wantField || !strings.HasPrefix(ce.Env, "GRACEKIT_") {
				t.Fatalf("ConfigError names %s (env %q), want %s and its variable: %v", ce.Field, ce.Env, tt.wantField, err)
			}
			if !strings.Contains(err.Error(), "Config."+tt.wantField) || ce.Want == "" {
				t.Fatalf("error does not say the field and what is wanted: %v", err)
			}
			_ = app.Stop(ctx) // closes whatever was opened before the failure
		})
	}
}

func TestConfigFromEnvRejectsMalformedValues(t *testing.T) {
	tests := []struct {
		env, give, wantField string
	}{
		{fxmodule.EnvPort, "http", "Port"},
		{fxmodule.EnvDrainTimeout, "5", "DrainTimeout"},
		{fxmodule.EnvMetadata, "zone", "Metadata"},
	}
	for _, tt := range tests {
		t.Run(tt.env+" "+tt.give, func(t *testing.T) {
			t.Setenv(tt.env, tt.give)
			_, err := fxmodule.ConfigFromEnv()
			var ce *fxmodule.ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.wantField || ce.Env != tt.env {
				t.Fatalf("ConfigFromEnv() error = %v, want a ConfigError for %s", err, tt.wantField)
			}
		})
	}
}

func TestStopTimeoutSetsTheBudgetToo(t *testing.T) {
	zkc := zktest.New(t)
	// 5 s cannot hold the default plan (14.4 s): the module must say so at
	// start, which it can only if the option reached its Config.
	app := fx.New(fx.NopLogger, fx.Supply(providerConfig(zkc, "quote-1", testutil.FreePort(t))), fx.Provide(helloServer),
		fxmodule.Discovery, fxmodule.StopTimeout(5*time.Second), fx.Invoke(func(*shutdown.Sequence) {}))
	var ce *fxmodule.ConfigError
	if err := app.Err(); !errors.As(err, &ce) || ce.Field != "StopTimeout" {
		t.Fatalf("app error %v, want a ConfigError for StopTimeout", err)
	}
}
