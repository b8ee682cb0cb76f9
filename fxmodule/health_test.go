package fxmodule_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
)

// An app's fxmodule.HealthCheck takes the instance out of rotation while it
// fails (503, OUT_OF_SERVICE in ZooKeeper) and back when it passes.
func TestAnAppsHealthCheckReachesTheRegistry(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	conn := testutil.ZKConn(t, zkc.Addrs())
	port := testutil.FreePort(t)
	cfg := providerConfig(zkc, "healthy", port)
	cfg.HealthInterval, cfg.HealthFailures, cfg.HealthPasses, cfg.HealthHold = 50*time.Millisecond, 2, 2, 100*time.Millisecond
	var sick atomic.Bool
	check := fxmodule.HealthCheck(func(context.Context) error {
		if sick.Load() {
			return errors.New("the database is down")
		}
		return nil
	})
	app := fxtest.New(t, fx.Supply(cfg, check), fx.Provide(helloServer), fxmodule.Discovery)
	app.RequireStart()
	defer app.RequireStop()
	status := func() sd.Status {
		data, _, err := conn.Get(zkc.path("quote", "healthy"))
		if err != nil {
			t.Fatal(err)
		}
		inst, err := sd.CuratorCodec{}.Decode("quote", "healthy", data)
		if err != nil {
			t.Fatal(err)
		}
		return inst.Status()
	}
	readyz := "http://127.0.0.1:" + strconv.Itoa(port) + "/readyz"
	sick.Store(true)
	testutil.WaitFor(t, "OUT_OF_SERVICE in ZooKeeper", func() bool { return status() == sd.StatusOutOfService })
	if code, _ := get(t, readyz); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while sick: %d, want 503", code)
	}
	sick.Store(false)
	testutil.WaitFor(t, "UP in ZooKeeper", func() bool { return status() == sd.StatusUp })
	if code, _ := get(t, readyz); code != http.StatusOK {
		t.Fatalf("/readyz after recovery: %d, want 200", code)
	}
}
