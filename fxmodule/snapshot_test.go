package fxmodule_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	"github.com/go-zookeeper/zk"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// gatewayApp is an fx gateway (Discovery and Gateway) with its snapshot
// in dir, routing service quote through call.
func gatewayApp(t *testing.T, zkc *zktest.Cluster, id, dir string, requireLive bool, call *kitendpoint.Endpoint, c **consumer.Consumer, more ...fx.Option) (*fxtest.App, int) {
	t.Helper()
	gatewayServer := func(lc fx.Lifecycle, c *consumer.Consumer) {
		lc.Append(fx.StartHook(func(ctx context.Context) (err error) {
			*call, err = c.Endpoint(ctx, "quote", echo)
			return err
		}))
	}
	port := testutil.FreePort(t)
	return fxtest.New(t,
		fx.Supply(fxmodule.Config{
			ZKServers:           zkc.ConnectString(),
			Service:             "gateway",
			InstanceID:          id,
			Address:             "127.0.0.1",
			Port:                port,
			FlushSecret:         secret,
			QuietWindow:         50 * time.Millisecond,
			SnapshotDir:         dir,
			SnapshotStartWait:   time.Second,
			SnapshotRequireLive: requireLive,
		}),
		fx.Provide(helloServer),
		fx.Invoke(gatewayServer),
		fxmodule.Discovery,
		fxmodule.Gateway,
		fx.Populate(c),
		fx.Options(more...),
	), port
}

// Issue 42: an fx gateway (Discovery and Gateway) that starts while every
// ZooKeeper server is down starts from its snapshot: its endpoint routes
// to the snapshot's instance, it serves, one line says it is unregistered,
// and it registers once ZooKeeper answers. Asked to require a live view
// (SnapshotRequireLive), it is not ready until its view turns live.
func TestAnFxGatewayStartsFromItsSnapshotWhileZooKeeperIsDown(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t) // of its own: the test stops it
	conn := testutil.ZKConn(t, zkc.Addrs())
	for _, p := range []string{"/services", "/services/quote"} {
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	data, err := sd.CuratorCodec{}.Encode(sd.Instance{Name: "quote", ID: "q1", Address: "127.0.0.1", Port: 9001})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Create("/services/quote/q1", data, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var call kitendpoint.Endpoint
	var c *consumer.Consumer
	first, _ := gatewayApp(t, zkc, "gateway-1", dir, false, &call, &c)
	first.RequireStart()
	if got, err := call(context.Background(), nil); err != nil || got != "127.0.0.1:9001" {
		t.Fatalf("the first gateway's call: %v, %v", got, err)
	}
	testutil.WaitFor(t, "the snapshots (quote, and the gateway service Discovery watches none of)", func() bool {
		files, _ := filepath.Glob(filepath.Join(dir, "*quote.snapshot.json"))
		return len(files) == 1
	})
	first.RequireStop()
	if err := zkc.StopAll(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = zkc.StartAll() })

	rec := &records{}
	call = nil
	second, port := gatewayApp(t, zkc, "gateway-2", dir, true, &call, &c, fx.Supply(slog.New(rec)))
	begin := time.Now()
	second.RequireStart()
	t.Logf("started in %v with ZooKeeper down", time.Since(begin).Round(time.Millisecond))
	if got, err := call(context.Background(), nil); err != nil || got != "127.0.0.1:9001" {
		t.Fatalf("the call from the snapshot: %v, %v; want 127.0.0.1:9001", got, err)
	}
	var se *consumer.StaleError
	if err := c.Live(); !errors.As(err, &se) {
		t.Fatalf("Live: %v, want a *consumer.StaleError", err)
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	if code, body := get(t, base+"/hello"); code != http.StatusOK {
		t.Fatalf("/hello: %d %s", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "snapshot") {
		t.Fatalf("/readyz while serving the snapshot: %d %q, want 503 saying so", code, body)
	}
	if w := rec.warnings("registering as soon as it answers"); len(w) != 1 {
		t.Fatalf("warnings: %q, want one about the registration", w)
	}
	if w := rec.warnings("serving the service's snapshot"); len(w) != 1 {
		t.Fatalf("warnings: %q, want one about the snapshot", w)
	}

	if err := zkc.StartAll(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the gateway registered once ZooKeeper answered", func() bool {
		ok, _, err := conn.Exists("/services/gateway/gateway-2")
		return err == nil && ok
	})
	testutil.WaitFor(t, "a live view", func() bool { return c.Live() == nil })
	testutil.WaitFor(t, "ready", func() bool {
		code, _ := get(t, base+"/readyz")
		return code == http.StatusOK
	})
	second.RequireStop()
	if ok, _, err := conn.Exists("/services/gateway/gateway-2"); err != nil || ok {
		t.Fatalf("the gateway's node after its stop: %v %v, want gone", ok, err)
	}
}

// Issue 42: GRACEKIT_SNAPSHOT_* are read, and a wait or age without a
// directory, or a bad value, is a *ConfigError naming the field.
func TestSnapshotConfigFromTheEnvironment(t *testing.T) {
	t.Setenv(fxmodule.EnvSnapshotDir, "/var/lib/gw")
	t.Setenv(fxmodule.EnvSnapshotStartWait, "2s")
	t.Setenv(fxmodule.EnvSnapshotMaxAge, "12h")
	t.Setenv(fxmodule.EnvSnapshotReadiness, "require-live")
	cfg, err := fxmodule.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SnapshotDir != "/var/lib/gw" || cfg.SnapshotStartWait != 2*time.Second || cfg.SnapshotMaxAge != 12*time.Hour || !cfg.SnapshotRequireLive {
		t.Fatalf("config: %q %v %v %v", cfg.SnapshotDir, cfg.SnapshotStartWait, cfg.SnapshotMaxAge, cfg.SnapshotRequireLive)
	}
	c, err := consumerOf(t, fxmodule.Config{ZKServers: "127.0.0.1:2181", SnapshotDir: t.TempDir(), SnapshotStartWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if w := c.SnapshotStartWait(); w != 2*time.Second {
		t.Fatalf("the consumer's start wait: %v", w)
	}

	var ce *fxmodule.ConfigError
	t.Setenv(fxmodule.EnvSnapshotReadiness, "always")
	if _, err := fxmodule.ConfigFromEnv(); !errors.As(err, &ce) || ce.Field != "SnapshotRequireLive" {
		t.Fatalf("a bad readiness: %v, want a ConfigError for SnapshotRequireLive", err)
	}
	t.Setenv(fxmodule.EnvSnapshotReadiness, "")
	t.Setenv(fxmodule.EnvSnapshotMaxAge, "0")
	if _, err := fxmodule.ConfigFromEnv(); !errors.As(err, &ce) || ce.Field != "SnapshotMaxAge" {
		t.Fatalf("a zero max age: %v, want a ConfigError for SnapshotMaxAge", err)
	}
	if _, err := consumerOf(t, fxmodule.Config{ZKServers: "127.0.0.1:2181", SnapshotStartWait: time.Second}); !errors.As(err, &ce) || ce.Field != "SnapshotStartWait" {
		t.Fatalf("a start wait without a directory: %v, want a ConfigError for SnapshotStartWait", err)
	}
}
