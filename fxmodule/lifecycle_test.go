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
)

func configErr(t *testing.T, err error, field string) *fxmodule.ConfigError {
	t.Helper()
	var ce *fxmodule.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a *fxmodule.ConfigError for %s", err, field)
	}
	if ce.Field != field || ce.Env == "" || ce.Want == "" {
		t.Fatalf("ConfigError %+v, want Field %s with its variable and what is allowed", ce, field)
	}
	return ce
}

// Issue 13, case 5: an Address no consumer can dial is a ConfigError.
func TestAnAddressWithAPortSchemeOrSpaceIsAConfigError(t *testing.T) {
	for _, addr := range []string{"10.0.0.7:8080", "http://10.0.0.7", "10.0.0.7 ", "[::1]"} {
		cfg := fxmodule.Config{ZKServers: "127.0.0.1:2181", Service: "quote", Address: addr, Port: 8080}
		err := fx.New(fx.NopLogger, fx.Supply(cfg), fx.Provide(helloServer), fxmodule.Discovery).Err()
		ce := configErr(t, err, "Address")
		if ce.Value != addr {
			t.Errorf("ConfigError names %q, want %q", ce.Value, addr)
		}
	}
	for _, addr := range []string{"10.0.0.7", "::1", "quote-1.svc"} {
		cfg := fxmodule.Config{ZKServers: "127.0.0.1:2181", Service: "quote", Address: addr, Port: 8080}
		if err := fx.New(fx.NopLogger, fx.Supply(cfg), fx.Provide(helloServer), fxmodule.Discovery).Err(); err != nil {
			t.Errorf("Address %q: %v", addr, err)
		}
	}
}

// Issue 13, case 6: a bad FlushAudiences value is a ConfigError naming the
// field, the variable and what is allowed.
func TestABadFlushAudienceIsAConfigError(t *testing.T) {
	for _, aud := range []string{"gw.internal:8080/flush", "ftp://gw/flush", "://", "/gracekit/flush"} {
		cfg := fxmodule.Config{ZKServers: "127.0.0.1:2181", Service: "gw", Address: "127.0.0.1", Port: 8080,
			FlushSecret: secret, FlushAudiences: []string{aud}}
		err := fx.New(fx.NopLogger, fx.Supply(cfg), fx.Provide(helloServer), fxmodule.Gateway, fxmodule.Discovery).Err()
		ce := configErr(t, err, "FlushAudiences")
		if ce.Value != aud {
			t.Errorf("ConfigError names %q, want %q", ce.Value, aud)
		}
	}
}

// Issue 13, case 8: a root-level fx.Invoke that appends the hook building
// the app's endpoints runs before the instance is registered, whatever
// the order of the options, and stops after the instance stopped serving.
func TestAHookAppendedByARootInvokeRunsBeforeRegistration(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	conn := testutil.ZKConn(t, zkc.Addrs())
	port := testutil.FreePort(t)
	var (
		built        atomic.Bool
		registeredAt atomic.Bool // the node existed when the user's hook ran
		stillListed  atomic.Bool // the node existed when the user's stop hook ran
	)
	srv := func() *http.Server {
		mux := http.NewServeMux()
		mux.HandleFunc("/hello", func(w http.ResponseWriter, _ *http.Request) {
			if !built.Load() {
				http.Error(w, "endpoints not built", http.StatusInternalServerError)
			}
		})
		return &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}
	}
	userHook := fx.Invoke(func(lc fx.Lifecycle) {
		lc.Append(fx.Hook{
			OnStart: func(context.Context) error {
				registeredAt.Store(exists(t, conn, zkc.path("quote", "ordered")))
				built.Store(true)
				return nil
			},
			OnStop: func(context.Context) error {
				stillListed.Store(exists(t, conn, zkc.path("quote", "ordered")))
				return nil
			},
		})
	})
	for _, tt := range []struct {
		name string
		opts []fx.Option
	}{
		{"with Discovery first", []fx.Option{fxmodule.Discovery, userHook}},
		{"with Discovery last", []fx.Option{userHook, fxmodule.Discovery}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			built.Store(false)
			app := fxtest.New(t, append(tt.opts, fx.Supply(providerConfig(zkc, "ordered", port)), fx.Provide(srv))...)
			app.RequireStart()
			if registeredAt.Load() {
				t.Error("the instance was registered before the app's own start hook ran")
			}
			if code, _ := get(t, "http://127.0.0.1:"+strconv.Itoa(port)+"/hello"); code != http.StatusOK {
				t.Errorf("/hello = %d once registered, want 200", code)
			}
			app.RequireStop()
			if stillListed.Load() {
				t.Error("the app's stop hook ran while the instance was still registered")
			}
		})
	}
}

// A start hook appended after Discovery's that fails leaves nothing
// registered, and Discovery's start never ran.
func TestAFailingLaterHookLeavesNothingRegistered(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	conn := testutil.ZKConn(t, zkc.Addrs())
	app := fx.New(fx.NopLogger, fxmodule.Discovery, fx.Supply(providerConfig(zkc, "failing", testutil.FreePort(t))), fx.Provide(helloServer),
		fx.Invoke(func(lc fx.Lifecycle) {
			lc.Append(fx.StartHook(func() error { return errors.New("the database is down") }))
		}))
	if err := app.Start(context.Background()); err == nil {
		t.Fatal("Start succeeded although a hook failed")
	}
	if exists(t, conn, zkc.path("quote", "failing")) {
		t.Fatal("registered although the app failed to start")
	}
	_ = app.Stop(context.Background())
}

// Issue 13, case 9: GRACEKIT_STOP_TIMEOUT reaches fx's stop timeout through
// FromEnv, and without it the mismatch fails the build.
func TestStopTimeoutFromTheEnvironmentReachesFx(t *testing.T) {
	t.Setenv(fxmodule.EnvZKServers, "127.0.0.1:2181")
	t.Setenv(fxmodule.EnvService, "quote")
	t.Setenv(fxmodule.EnvAddress, "127.0.0.1")
	t.Setenv(fxmodule.EnvPort, "8080")
	t.Setenv(fxmodule.EnvStopTimeout, "40s")

	err := fx.New(fx.NopLogger, fx.Provide(fxmodule.ConfigFromEnv), fx.Provide(helloServer), fxmodule.Discovery).Err()
	configErr(t, err, "StopTimeout")

	if err := fx.New(fx.NopLogger, fx.Provide(fxmodule.ConfigFromEnv), fx.Provide(helloServer), fxmodule.Discovery, fxmodule.StopTimeout(40*time.Second)).Err(); err != nil {
		t.Fatalf("with a matching fxmodule.StopTimeout: %v", err)
	}
	app := fx.New(fx.NopLogger, fxmodule.FromEnv(), fx.Provide(helloServer), fxmodule.Discovery)
	if err := app.Err(); err != nil {
		t.Fatalf("FromEnv: %v", err)
	}
	if got := app.StopTimeout(); got != 40*time.Second {
		t.Fatalf("fx's stop timeout with FromEnv: %s, want 40s", got)
	}

	t.Setenv(fxmodule.EnvStopTimeout, "forty")
	configErr(t, fx.New(fx.NopLogger, fxmodule.FromEnv()).Err(), "StopTimeout")
}
