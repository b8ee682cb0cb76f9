package fxmodule_test

import (
	"cmp"
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
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/shutdown/flush"
	"github.com/gracekit/gracekit/zktest"
)

// TestMain lets tests that leave their server alone share one (sharedZK);
// goleak checks after it stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(zktest.SharedMain(m)) }

// zkEnv is a ZooKeeper server and the base path a test's nodes go under.
type zkEnv struct {
	*zktest.Cluster
	// base is Config.BasePath: empty (sd.DefaultBasePath) on a server of
	// the test's own, a path no other test uses on the shared one.
	base string
}

// sharedZK is the test binary's shared server, with a base path no other
// test uses: the test must leave the server alone and count nothing
// server-wide (see zktest's package doc).
func sharedZK(t *testing.T) *zkEnv { return &zkEnv{zktest.Shared(t), zktest.UniquePath(t)} }

// ownZK is a server of the test's own, at the default base path, for a
// test that stops it or needs it configured otherwise (TLS, SASL).
func ownZK(t *testing.T, opts ...zktest.Option) *zkEnv {
	return &zkEnv{Cluster: zktest.New(t, opts...)}
}

// services is the base path the test's service nodes are under.
func (z *zkEnv) services() string { return cmp.Or(z.base, sd.DefaultBasePath) }

// path is the znode of instance id of service.
func (z *zkEnv) path(service, id string) string { return z.services() + "/" + service + "/" + id }

// config is a Config with the server and the base path only, what a
// plain consumer needs.
func (z *zkEnv) config() fxmodule.Config {
	return fxmodule.Config{ZKServers: z.ConnectString(), BasePath: z.base}
}

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

func exists(t *testing.T, conn testutil.ZK, path string) bool {
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

func providerConfig(z *zkEnv, id string, port int) fxmodule.Config {
	cfg := z.config()
	cfg.Service, cfg.InstanceID, cfg.Address, cfg.Port = "quote", id, "127.0.0.1", port
	cfg.QuietWindow, cfg.MaxQuiesce, cfg.DrainTimeout = 50*time.Millisecond, time.Second, time.Second
	return cfg
}

func TestDiscoveryRegistersServesAndStopsCleanly(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	port := testutil.FreePort(t)
	cfg := providerConfig(zkc, "quote-1", port)
	opts := fx.Options(
		fx.Supply(cfg),
		fx.Provide(helloServer),
		fxmodule.Discovery,
	)
	if err := fx.ValidateApp(opts, fx.Invoke(func(*provider.Provider, *shutdown.Tracker, *shutdown.Readiness, *sd.Session) {})); err != nil {
		t.Fatalf("ValidateApp: %v", err)
	}

	var (
		p    *provider.Provider
		sess *sd.Session
	)
	app := fxtest.New(t, opts, fx.Populate(&p, &sess))
	conn := testutil.ZKConn(t, zkc.Addrs())
	if exists(t, conn, zkc.path("quote", "quote-1")) {
		t.Fatal("node exists before start")
	}
	if _, err := sess.Client(); !errors.Is(err, sd.ErrNotStarted) {
		t.Fatalf("the session before start: %v, want sd.ErrNotStarted (no I/O in constructors)", err)
	}
	app.RequireStart()

	_, stat, err := conn.Get(zkc.path("quote", "quote-1"))
	if err != nil {
		t.Fatalf("node missing after start: %v", err)
	}
	client, err := sess.Client()
	if err != nil || stat.EphemeralOwner != client.SessionID() {
		t.Fatalf("the node is owned by 0x%x, want the module's session (%v)", stat.EphemeralOwner, err)
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

	app.RequireStop()
	if exists(t, conn, zkc.path("quote", "quote-1")) {
		t.Fatal("node still there after stop")
	}
	rep := p.Report()
	if rep.Err != nil {
		t.Fatalf("stop error: %v", rep.Err)
	}
	if len(rep.Flush) != 0 {
		t.Fatalf("flushed %d targets, want none", len(rep.Flush))
	}
	if _, err := sess.Client(); !errors.Is(err, sd.ErrClosed) {
		t.Fatalf("the session after stop: %v, want sd.ErrClosed", err)
	}
	if _, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
		t.Fatal("server still accepts connections after stop")
	}
}

// The server's Addr is honoured: the module listens there and, with
// Config.Port zero, registers its port.
func TestDiscoveryListensOnTheServersAddr(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	port := testutil.FreePort(t)
	cfg := providerConfig(zkc, "quote-1", 0)
	var p *provider.Provider
	app := fxtest.New(t, fx.Supply(cfg), fxmodule.Discovery, fx.Populate(&p),
		fx.Provide(func() *http.Server {
			srv := helloServer()
			srv.Addr = "127.0.0.1:" + strconv.Itoa(port)
			return srv
		}))
	app.RequireStart()
	defer app.RequireStop()
	if got := p.Instance().Port; got != port {
		t.Fatalf("registered port %d, want the server's %d", got, port)
	}
	if got := p.Addr().String(); got != "127.0.0.1:"+strconv.Itoa(port) {
		t.Fatalf("listens on %s, want the server's Addr", got)
	}
	if code, body := get(t, "http://"+p.Addr().String()+"/hello"); code != http.StatusOK || body != "hello" {
		t.Fatalf("/hello = %d %q, want 200 hello", code, body)
	}
}

// echo is a factory whose endpoint answers with its instance string.
func echo(instance string) (kitendpoint.Endpoint, io.Closer, error) {
	return func(context.Context, any) (any, error) { return instance, nil }, nil, nil
}

// A service that serves and calls others: one session for both roles, the
// consumer started before the provider and stopped after its drain.
func TestDiscoveryAndConsumerInOneApp(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	port := testutil.FreePort(t)
	var (
		c    *consumer.Consumer
		p    *provider.Provider
		sess *sd.Session
		call kitendpoint.Endpoint
	)
	atDrain := make(chan error, 1)
	server := func(lc fx.Lifecycle, c *consumer.Consumer) *http.Server {
		lc.Append(fx.StartHook(func(ctx context.Context) (err error) {
			call, err = c.Endpoint(ctx, "quote", echo) // the service calls itself
			return err
		}))
		srv := helloServer()
		srv.RegisterOnShutdown(func() { // once the drain began
			_, err := c.Instancer(context.Background(), "quote")
			atDrain <- err
		})
		return srv
	}
	opts := fx.Options(fx.Supply(providerConfig(zkc, "quote-1", port)), fx.Provide(server), fxmodule.Discovery, fxmodule.Consumer)
	if err := fx.ValidateApp(opts); err != nil {
		t.Fatalf("ValidateApp: %v", err)
	}
	app := fxtest.New(t, opts, fx.Populate(&c, &p, &sess))
	app.RequireStart()

	want := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	testutil.WaitFor(t, "the consumer routes to the provider", func() bool {
		got, err := call(context.Background(), nil)
		return err == nil && got == want
	})
	in, err := c.Instancer(context.Background(), "quote")
	if err != nil {
		t.Fatal(err)
	}
	if l := in.Instances(); len(l) != 1 || l[0].ID != "quote-1" || l[0].Port != port {
		t.Fatalf("the Instancer lists %+v, want quote-1 on port %d", l, port)
	}

	app.RequireStop()
	if err := <-atDrain; err != nil {
		t.Fatalf("the consumer during the provider's drain: %v, want it still open", err)
	}
	if err := p.Report().Err; err != nil {
		t.Fatalf("stop error: %v", err)
	}
	if _, err := sess.Client(); !errors.Is(err, sd.ErrClosed) {
		t.Fatalf("the shared session after stop: %v, want sd.ErrClosed (the last role closed it)", err)
	}
	if _, err := c.Instancer(context.Background(), "quote"); !errors.Is(err, sd.ErrClosed) {
		t.Fatalf("the consumer after stop: %v, want sd.ErrClosed", err)
	}
}

// A plain consumer needs the ZooKeeper fields only: no service, address,
// port or flush secret, and no server.
func TestConsumerAloneNeedsNoSecret(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	cfg := zkc.config()
	opts := fx.Options(fx.Supply(cfg), fxmodule.Consumer)
	if err := fx.ValidateApp(opts, fx.Invoke(func(*consumer.Consumer) {})); err != nil {
		t.Fatalf("ValidateApp: %v", err)
	}
	var c *consumer.Consumer
	app := fxtest.New(t, opts, fx.Populate(&c))
	app.RequireStart()
	in, err := c.Instancer(context.Background(), "nobody")
	if err != nil {
		t.Fatalf("Instancer(nobody) = %v, want an empty service", err)
	}
	if n := len(in.Instances()); n != 0 {
		t.Fatalf("the missing service lists %d instances", n)
	}
	app.RequireStop()
}

func TestGatewayWithoutDiscoveryFailsToBuild(t *testing.T) {
	cfg := fxmodule.Config{ZKServers: "127.0.0.1:1", FlushSecret: secret, Address: "127.0.0.1", Port: 8080}
	app := fx.New(fx.NopLogger, fx.Supply(cfg), fx.Provide(helloServer), fxmodule.Gateway)
	if err := app.Err(); !errors.Is(err, fxmodule.ErrGatewayNeedsDiscovery) {
		t.Fatalf("app error %v, want ErrGatewayNeedsDiscovery", err)
	}
}

// Constructors do no I/O and start nothing: an app that fails to build,
// early (a bad Config) or late (an fx.Invoke error after every module was
// built), leaves no goroutine behind.
func TestAFailedBuildLeaksNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	port := testutil.FreePort(t) // nothing listens there
	good := fxmodule.Config{ZKServers: "127.0.0.1:" + strconv.Itoa(port), Service: "quote", Address: "127.0.0.1", Port: port, FlushSecret: secret, FlushGateways: []string{"gateway"}}
	bad := good
	bad.Service = ""
	boom := errors.New("boom")
	tests := []struct {
		name string
		give fx.Option
		want func(error) bool
	}{
		{"a bad Config", fx.Options(fx.Supply(bad), fxmodule.Discovery, fxmodule.Consumer), func(err error) bool {
			var ce *fxmodule.ConfigError
			return errors.As(err, &ce)
		}},
		{"an invoke that fails after the modules were built", fx.Options(fx.Supply(good), fxmodule.Discovery, fxmodule.Gateway,
			fx.Invoke(func(*provider.Provider, *consumer.Consumer, *flush.Handler) error { return boom })), func(err error) bool { return errors.Is(err, boom) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := fx.New(fx.NopLogger, fx.Provide(helloServer), tt.give)
			if err := app.Err(); !tt.want(err) {
				t.Fatalf("app error %v", err)
			}
		})
	}
}

func TestProviderStopFlushesTheGateway(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	gwPort, pPort := testutil.FreePort(t), testutil.FreePort(t)

	var (
		call kitendpoint.Endpoint
		c    *consumer.Consumer
	)
	gatewayServer := func(lc fx.Lifecycle, c *consumer.Consumer) *http.Server {
		lc.Append(fx.StartHook(func(ctx context.Context) (err error) {
			call, err = c.Endpoint(ctx, "quote", echo)
			return err
		}))
		return helloServer()
	}
	gwOpts := fx.Options(
		fx.Supply(fxmodule.Config{
			ZKServers:   zkc.ConnectString(),
			BasePath:    zkc.base,
			Service:     "gateway",
			InstanceID:  "gateway-1",
			Address:     "127.0.0.1",
			Port:        gwPort,
			FlushSecret: secret,
			QuietWindow: 50 * time.Millisecond,
		}),
		fx.Provide(gatewayServer),
		fxmodule.Discovery,
		fxmodule.Gateway,
	)
	if err := fx.ValidateApp(gwOpts, fx.Invoke(func(*consumer.Consumer, *flush.Handler, *provider.Provider) {})); err != nil {
		t.Fatalf("ValidateApp: %v", err)
	}
	gateway := fxtest.New(t, gwOpts, fx.Populate(&c))
	gateway.RequireStart()
	defer gateway.RequireStop()

	conn := testutil.ZKConn(t, zkc.Addrs())
	data, _, err := conn.Get(zkc.path("gateway", "gateway-1"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"`+sd.MetadataFlushPath+`":"`+fxmodule.DefaultFlushPath+`"`) {
		t.Fatalf("gateway node lacks its flush path: %s", data)
	}
	if _, ok := c.Evicter("quote"); !ok {
		t.Fatal("no evicter for quote")
	}

	pcfg := providerConfig(zkc, "quote-1", pPort)
	pcfg.FlushSecret = secret
	pcfg.FlushGateways = []string{"gateway"}
	var p *provider.Provider
	prov := fxtest.New(t, fx.Supply(pcfg), fx.Provide(helloServer), fxmodule.Discovery, fx.Populate(&p))
	prov.RequireStart()

	want := net.JoinHostPort("127.0.0.1", strconv.Itoa(pPort))
	testutil.WaitFor(t, "the gateway routes to the provider", func() bool {
		got, err := call(context.Background(), nil)
		return err == nil && got == want
	})

	// The Evicter acts at once, while ZooKeeper still lists the provider
	// as UP: no watch event can be what removes it here.
	ev, _ := c.Evicter("quote")
	if res, err := ev.Evict(context.Background(), flush.Request{Service: "quote", ID: "quote-1", Address: "127.0.0.1", Port: pPort}); err != nil || res != flush.Evicted {
		t.Fatalf("Evict: %v, %v; want evicted", res, err)
	}
	if got, err := call(context.Background(), nil); err == nil {
		t.Fatalf("the gateway routes to %v right after the eviction", got)
	}
	if !exists(t, conn, zkc.path("quote", "quote-1")) {
		t.Fatal("the provider's node is gone: the check above proved nothing")
	}

	prov.RequireStop()
	rep := p.Report()
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
	t.Parallel()
	zkc := sharedZK(t)
	good := func() fxmodule.Config { return providerConfig(zkc, "quote-1", 18080) }
	tests := []struct {
		name      string
		give      func(*fxmodule.Config)
		gateway   bool
		addr      string // the server's Addr
		wantField string
	}{
		{name: "no ZooKeeper servers", give: func(c *fxmodule.Config) { c.ZKServers = "" }, wantField: "ZKServers"},
		{name: "no service", give: func(c *fxmodule.Config) { c.Service = "" }, wantField: "Service"},
		{name: "port out of range", give: func(c *fxmodule.Config) { c.Port = 70000 }, wantField: "Port"},
		{name: "no port and no server Addr", give: func(c *fxmodule.Config) { c.Port = 0 }, wantField: "Port"},
		{name: "a port the server's Addr contradicts", give: func(*fxmodule.Config) {}, addr: "127.0.0.1:18081", wantField: "Port"},
		{name: "flush gateways without a secret", give: func(c *fxmodule.Config) { c.FlushGateways = []string{"gateway"} }, wantField: "FlushSecret"},
		{name: "gateway without a secret", give: func(*fxmodule.Config) {}, gateway: true, wantField: "FlushSecret"},
		{name: "relative flush target", give: func(c *fxmodule.Config) { c.FlushSecret = secret; c.FlushTargets = []string{"gw:8080/flush"} }, wantField: "FlushTargets"},
		{name: "quiet window over max quiesce", give: func(c *fxmodule.Config) { c.QuietWindow = 3 * time.Second }, wantField: "QuietWindow"},
		{name: "stop timeout below the sequence's bounds", give: func(c *fxmodule.Config) { c.StopTimeout = 2 * time.Second }, wantField: "StopTimeout"},
		{name: "a service named ..", give: func(c *fxmodule.Config) { c.Service = ".." }, wantField: "Service"},
		{name: "metadata that sets the status", give: func(c *fxmodule.Config) { c.Metadata = map[string]string{sd.MetadataStatus: "DOWN"} }, wantField: "Metadata"},
		{name: "a flush path the probes use", give: func(c *fxmodule.Config) { c.FlushSecret = secret; c.FlushPath = "/readyz" }, gateway: true, wantField: "FlushPath"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good()
			tt.give(&cfg)
			module := fxmodule.Discovery
			if tt.gateway {
				module = fx.Options(fxmodule.Discovery, fxmodule.Gateway)
			}
			server := func() *http.Server {
				srv := helloServer()
				srv.Addr = tt.addr
				return srv
			}
			app := fx.New(fx.NopLogger, fx.Supply(cfg), fx.Provide(server), module,
				fx.Invoke(func(*provider.Provider) {}))
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
	t.Parallel()
	zkc := sharedZK(t)
	// 5 s cannot hold the default plan (14.4 s): the module must say so
	// when the app is built, which it can only if the option reached its
	// Config.
	app := fx.New(fx.NopLogger, fx.Supply(providerConfig(zkc, "quote-1", testutil.FreePort(t))), fx.Provide(helloServer),
		fxmodule.Discovery, fxmodule.StopTimeout(5*time.Second))
	var ce *fxmodule.ConfigError
	if err := app.Err(); !errors.As(err, &ce) || ce.Field != "StopTimeout" {
		t.Fatalf("app error %v, want a ConfigError for StopTimeout", err)
	}
}
