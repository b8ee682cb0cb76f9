package fxmodule_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kit/kit/endpoint"
	kitsd "github.com/go-kit/kit/sd"
	"github.com/go-kit/kit/sd/lb"
	kitzk "github.com/go-kit/kit/sd/zk"
	"github.com/go-kit/log"
	"github.com/go-zookeeper/zk"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
)

// waitKit reads a go-kit Instancer's events until one satisfies ok.
func waitKit(t *testing.T, ch <-chan kitsd.Event, what string, ok func([]string) bool) {
	t.Helper()
	deadline := time.After(testutil.WaitLimit)
	var last []string
	for {
		select {
		case ev := <-ch:
			last = ev.Instances
			if ev.Err == nil && ok(ev.Instances) {
				return
			}
		case <-deadline:
			t.Fatalf("go-kit's Instancer: no event where %s within %v; last %q", what, testutil.WaitLimit, last)
		}
	}
}

// With GoKitRegistration, a stock go-kit sd/zk Instancer lists the
// provider while it runs, and its Curator node is there for gracekit and
// Curator readers; the stop removes both.
func TestGoKitRegistrationIsReadByAStockGoKitConsumer(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	port := testutil.FreePort(t)
	app := fxtest.New(t, fx.Supply(providerConfig(zkc, "quote-1", port)), fx.Provide(helloServer),
		fxmodule.Discovery, fxmodule.GoKitRegistration(zkc.services()))

	client, err := kitzk.NewClient(zkc.Addrs(), log.NewNopLogger(), kitzk.EventHandler(func(zk.Event) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Stop()
	in, err := kitzk.NewInstancer(client, zkc.services()+"/quote", log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer in.Stop()
	ch := make(chan kitsd.Event, 64)
	in.Register(ch)
	defer in.Deregister(ch)

	app.RequireStart()
	want := "127.0.0.1:" + strconv.Itoa(port)
	waitKit(t, ch, "it lists "+want, func(got []string) bool { return slices.Contains(got, want) })
	conn := testutil.ZKConn(t, zkc.Addrs())
	if !exists(t, conn, zkc.path("quote", "quote-1")) || !exists(t, conn, zkc.path("quote", sd.GoKitTwinPrefix+"quote-1")) {
		t.Fatal("want the Curator node and its go-kit twin while the provider runs")
	}
	app.RequireStop()
	waitKit(t, ch, "it lists nothing", func(got []string) bool { return len(got) == 0 })
	if exists(t, conn, zkc.path("quote", "quote-1")) || exists(t, conn, zkc.path("quote", sd.GoKitTwinPrefix+"quote-1")) {
		t.Error("a node is left after the stop")
	}
}

// Issue 31: GoKitRegistration's path goes through the one path check
// (sd.BasePath's), when the app is built, not after the provider
// registered.
func TestGoKitRegistrationRefusesARelativePath(t *testing.T) {
	cfg := fxmodule.Config{ZKServers: "127.0.0.1:1", Service: "quote", Address: "127.0.0.1", Port: 8080}
	for _, p := range []string{"services", "/services//quote", "/", "/services/./x", "/services/"} {
		err := fx.New(fx.NopLogger, fx.Supply(cfg), fx.Provide(helloServer), fxmodule.Discovery, fxmodule.GoKitRegistration(p)).Err()
		if err == nil || !strings.Contains(err.Error(), "GoKitRegistration") {
			t.Errorf("GoKitRegistration(%q): build error %v, want one naming the option", p, err)
		}
	}
}

// Issue 31: the drain marks are refused in Config.Metadata, as the
// status and the flush path are: an instance could otherwise register
// drained, or undo an undrain at its next expiry.
func TestConfigMetadataRefusesTheDrainMarks(t *testing.T) {
	for _, k := range []string{sd.MetadataDrainedBy, sd.MetadataDrainedStatus, sd.MetadataOutBy, sd.MetadataStatus} {
		cfg := fxmodule.Config{ZKServers: "127.0.0.1:1", Service: "quote", Address: "127.0.0.1", Port: 8080, Metadata: map[string]string{k: "operator"}}
		err := fx.New(fx.NopLogger, fx.Supply(cfg), fx.Provide(helloServer), fxmodule.Discovery).Err()
		var ce *fxmodule.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), k) {
			t.Errorf("Metadata %s: build error %v, want a ConfigError naming it", k, err)
		}
	}
}

// With ReadGoKitNodes, the app's consumer routes to providers go-kit's own
// Registrar registered, beside gracekit's, and counts no node malformed.
func TestReadGoKitNodesRoutesToGoKitProviders(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	kitAddr := goKitProvider(t, zkc, zkc.services())

	in, ch := readQuote(t, zkc.config(), fxmodule.ReadGoKitNodes())
	waitKit(t, ch, "it lists the go-kit provider", func(got []string) bool {
		return slices.Equal(got, []string{kitAddr})
	})
	if st := in.Stats(); st.Malformed != 0 {
		t.Errorf("%d nodes counted as malformed, want 0", st.Malformed)
	}
}

// Issue 23: a gracekit provider registered for a migration is listed by
// every kind of consumer, each reading it the way it reads any service: a
// stock Apache Curator client (Spring's) under the provider's base path,
// where it finds nothing but Curator JSON; a stock go-kit sd/zk consumer,
// unchanged, under go-kit's path, where the provider wrote its twin beside
// a provider still on go-kit's own Registrar, and it gets instance strings
// only; and a gracekit consumer of go-kit's path (ReadGoKitTwins), both
// providers, none malformed. The same Curator client pointed at go-kit's
// path fails, as docs/MIGRATING.md says, since a go-kit node is no JSON.
// The stop empties every list.
func TestAMigratingProviderIsListedByCuratorGoKitAndGracekit(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	kitPath, curatorBase := zkc.base+"/services", zkc.base+"/discovery"
	kitAddr := goKitProvider(t, zkc, kitPath)

	port := testutil.FreePort(t)
	cfg := providerConfig(zkc, "quote-1", port)
	cfg.BasePath = curatorBase
	prov := fxtest.New(t, fx.Supply(cfg), fx.Provide(helloServer), fxmodule.Discovery, fxmodule.GoKitRegistration(kitPath))
	kitCh := testutil.GoKitEvents(t, zkc.Addrs(), kitPath+"/quote")
	in, ch := readQuote(t, fxmodule.Config{ZKServers: zkc.ConnectString(), BasePath: kitPath}, fxmodule.ReadGoKitTwins())

	prov.RequireStart()
	want := "127.0.0.1:" + strconv.Itoa(port)
	both := []string{kitAddr, want}
	slices.Sort(both)
	sorted := func(got []string) []string { got = slices.Clone(got); slices.Sort(got); return got }
	waitKit(t, kitCh, "go-kit's consumer lists both providers and nothing else", func(got []string) bool { return slices.Equal(sorted(got), both) })
	waitKit(t, ch, "gracekit's consumer lists both", func(got []string) bool { return slices.Equal(sorted(got), both) })
	if st := in.Stats(); st.Malformed != 0 {
		t.Errorf("gracekit's consumer counted %d nodes malformed, want 0", st.Malformed)
	}
	curator := testutil.NewCurator(t, zkc.ConnectString())
	got, err := curator.List(t, curatorBase, "quote")
	if err != nil || !slices.Equal(got, []string{"quote-1 127.0.0.1 " + strconv.Itoa(port) + " null UP"}) {
		t.Fatalf("Curator's queryForInstances under %s: %q, %v; want quote-1, UP", curatorBase, got, err)
	}
	if got, err := curator.List(t, kitPath, "quote"); err == nil {
		t.Errorf("Curator's queryForInstances under go-kit's path: %q, want the failure MIGRATING.md states", got)
	} else {
		t.Logf("Curator under go-kit's path, as documented: %v", err)
	}

	prov.RequireStop()
	waitKit(t, kitCh, "go-kit's consumer lists the go-kit provider only", func(got []string) bool { return slices.Equal(got, []string{kitAddr}) })
	waitKit(t, ch, "gracekit's consumer lists the go-kit provider only", func(got []string) bool { return slices.Equal(got, []string{kitAddr}) })
	if got, err := curator.List(t, curatorBase, "quote"); err != nil || len(got) != 0 {
		t.Fatalf("Curator after the stop: %q, %v; want no instance", got, err)
	}
}

// readQuote starts an app with fxmodule.Consumer and read (ReadGoKitNodes
// or ReadGoKitTwins) and subscribes to its Instancer of "quote"; both end
// with the test.
func readQuote(t *testing.T, cfg fxmodule.Config, read fx.Option) (*sd.Instancer, chan kitsd.Event) {
	t.Helper()
	var c *consumer.Consumer
	app := fxtest.New(t, fx.Supply(cfg), fxmodule.Consumer, read, fx.Populate(&c))
	app.RequireStart()
	t.Cleanup(app.RequireStop)
	in, err := c.Instancer(context.Background(), "quote")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan kitsd.Event, 16)
	in.Register(ch)
	t.Cleanup(func() { in.Deregister(ch) })
	return in, ch
}

// goKitSession is the session timeout of the tests' go-kit clients.
const goKitSession = 30 * time.Second

// goKitProvider serves HTTP and registers it under path/quote with go-kit's
// own sd/zk Registrar, until the test ends; it returns the instance string.
func goKitProvider(t *testing.T, zkc *zkEnv, path string) string {
	t.Helper()
	kit := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "go-kit") }))
	t.Cleanup(kit.Close)
	// go-kit's 5 s default session expired under make stress's CPU hog:
	// the node went, and go-kit's Registrar never writes it again.
	client, err := kitzk.NewClient(zkc.Addrs(), log.NewNopLogger(), kitzk.EventHandler(func(zk.Event) {}), kitzk.SessionTimeout(goKitSession))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Stop)
	addr := strings.TrimPrefix(kit.URL, "http://")
	kitzk.NewRegistrar(client, kitzk.Service{Path: path, Name: "quote", Data: []byte(addr)}, log.NewNopLogger()).Register()
	return addr
}

// Issue 31: out of rotation means the same thing to go-kit's consumers as
// to Curator's. A stock go-kit sd/zk consumer (zk.NewInstancer,
// sd.NewEndpointer, lb.NewRoundRobin, unchanged) in front of a migrating
// provider (GoKitRegistration beside its Curator node) and a go-kit one
// sends the migrating one no call once its Endpointer dropped it, and it
// drops it, as a Curator reader drops OUT_OF_SERVICE, when an operator
// drains the provider's Curator node, when its health check fails, and
// when it stops; the twin comes back with undrain and health. Before
// issue 31 the twin stayed while drained or sick, and the go-kit consumer
// kept a share of its calls on it.
func TestAStockGoKitConsumerStopsCallingADrainedSickOrStoppingMigratingProvider(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	kitPath, curatorBase := zkc.base+"/services", zkc.base+"/discovery"
	kitAddr := goKitProvider(t, zkc, kitPath)
	conn := testutil.ZKConn(t, zkc.Addrs())

	port := testutil.FreePort(t)
	cfg := providerConfig(zkc, "m1", port)
	// Curator nodes apart from go-kit's path, where go-kit's consumer would
	// read the JSON as an instance string (docs/MIGRATING.md).
	cfg.BasePath = curatorBase
	cfg.HealthInterval, cfg.HealthFailures, cfg.HealthPasses, cfg.HealthHold = 20*time.Millisecond, 1, 1, time.Millisecond
	var sick atomic.Bool
	check := fxmodule.HealthCheck(func(context.Context) error {
		if sick.Load() {
			return errors.New("the database is down")
		}
		return nil
	})
	server := func() *http.Server {
		mux := http.NewServeMux()
		mux.HandleFunc("/hello", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "m1") })
		return &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}
	}
	app := fx.New(fx.NopLogger, fx.Supply(cfg, check), fx.Provide(server), fxmodule.Discovery, fxmodule.GoKitRegistration(kitPath))
	if err := app.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = app.Stop(context.Background())
		}
	})

	// go-kit's consumer, as its documentation builds one.
	client, err := kitzk.NewClient(zkc.Addrs(), log.NewNopLogger(), kitzk.EventHandler(func(zk.Event) {}), kitzk.SessionTimeout(goKitSession))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Stop()
	in, err := kitzk.NewInstancer(client, kitPath+"/quote", log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer in.Stop()
	hc := &http.Client{Timeout: 2 * time.Second}
	factory := func(instance string) (endpoint.Endpoint, io.Closer, error) {
		return func(ctx context.Context, _ any) (any, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+instance+"/hello", nil)
			resp, err := hc.Do(req)
			if err != nil {
				return nil, err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			return string(b), err
		}, nil, nil
	}
	endpointer := kitsd.NewEndpointer(in, factory, log.NewNopLogger())
	defer endpointer.Close()
	balancer := lb.NewRoundRobin(endpointer)
	count := func(want int) func() bool {
		return func() bool { eps, err := endpointer.Endpoints(); return err == nil && len(eps) == want }
	}
	// A count of one is m1 gone only while the go-kit provider stays: the
	// Instancer's last set must be that provider alone. (Once, under make
	// stress, m1 served 6 of 40 calls after a count of one, the go-kit
	// provider the other 34.)
	twinPath := kitPath + "/quote/" + sd.GoKitTwinPrefix + "m1"
	events := make(chan kitsd.Event, 64)
	in.Register(events)
	defer in.Deregister(events)
	var lastSet []string
	kitOnly := func() bool {
		for len(events) > 0 {
			lastSet = (<-events).Instances
		}
		if len(lastSet) != 1 || lastSet[0] != kitAddr || !count(1)() {
			return false
		}
		// And m1's twin is gone from ZooKeeper: go-kit's GetEntries
		// leaves out a child whose read failed, so its set can lack m1
		// for a moment while the twin is still there.
		ok, _, err := conn.Exists(twinPath)
		return err == nil && !ok
	}
	// calls sends n calls and returns how many m1 served.
	calls := func(n int) int {
		served := 0
		for range n {
			ep, err := balancer.Endpoint()
			if err != nil {
				t.Fatal(err)
			}
			got, err := ep(context.Background(), nil)
			if err != nil {
				t.Fatalf("a call failed: %v", err)
			}
			if got == "m1" {
				served++
			}
		}
		return served
	}
	testutil.WaitFor(t, "go-kit's Endpointer has both providers", count(2))
	if ok, _, err := conn.Exists(twinPath); err != nil || !ok {
		t.Fatalf("m1's go-kit twin is not at %s (%v)", twinPath, err)
	}
	if n := calls(20); n == 0 {
		t.Fatal("m1 served none of 20 calls while in rotation")
	}

	curatorPath := curatorBase + "/quote/m1"
	rewrite := func(f func(sd.Codec, string, string, []byte) ([]byte, error)) {
		data, stat, err := conn.Get(curatorPath)
		if err != nil {
			t.Fatal(err)
		}
		out, err := f(sd.CuratorCodec{}, "quote", "m1", data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Set(curatorPath, out, stat.Version); err != nil {
			t.Fatal(err)
		}
	}
	for _, phase := range []struct {
		name      string
		out, back func()
	}{
		{"drained by an operator", func() { rewrite(sd.Drain) }, func() { rewrite(sd.Undrain) }},
		{"failing its health check", func() { sick.Store(true) }, func() { sick.Store(false) }},
	} {
		phase.out()
		testutil.WaitFor(t, "go-kit's Endpointer drops m1 "+phase.name, kitOnly)
		if n := calls(40); n != 0 {
			t.Fatalf("m1 %s served %d of 40 go-kit calls after go-kit's consumer dropped it", phase.name, n)
		}
		if eps, _ := endpointer.Endpoints(); len(eps) != 1 {
			t.Fatalf("m1 %s: go-kit's Endpointer has %d endpoints, want the go-kit provider alone (%s)", phase.name, len(eps), kitAddr)
		}
		phase.back()
		testutil.WaitFor(t, "go-kit's Endpointer has m1 again after "+phase.name, count(2))
		testutil.WaitFor(t, "m1 serves go-kit calls again", func() bool { return calls(4) > 0 })
	}

	done := make(chan error, 1)
	go func() { done <- app.Stop(context.Background()) }()
	stopped = true
	testutil.WaitFor(t, "go-kit's Endpointer drops m1 as it stops", kitOnly)
	if n := calls(40); n != 0 {
		t.Fatalf("m1, stopping, served %d of 40 go-kit calls after go-kit's consumer dropped it", n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
