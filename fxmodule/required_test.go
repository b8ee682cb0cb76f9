package fxmodule_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/internal/testutil"
)

// A quickstart run with nothing set fails to build with one error that
// names every required variable, not one variable per attempt.
func TestNothingSetNamesEveryRequiredVariable(t *testing.T) {
	tests := []struct {
		name string
		give fx.Option
		want []string
	}{
		{
			name: "an HTTP provider",
			give: fx.Options(fx.Provide(helloServer), fxmodule.Discovery),
			want: []string{fxmodule.EnvZKServers, fxmodule.EnvService, fxmodule.EnvAddress, fxmodule.EnvPort},
		},
		{
			name: "a gRPC provider",
			give: fx.Options(fx.Provide(newGRPCServer), fxmodule.Discovery),
			want: []string{fxmodule.EnvZKServers, fxmodule.EnvService, fxmodule.EnvAddress, fxmodule.EnvGRPCPort},
		},
		{
			name: "a gateway",
			give: fx.Options(fx.Provide(helloServer), fxmodule.Discovery, fxmodule.Gateway),
			want: []string{fxmodule.EnvZKServers, fxmodule.EnvService, fxmodule.EnvAddress, fxmodule.EnvFlushSecret},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearGracekitEnv(t)
			err := fx.New(fx.NopLogger, fxmodule.FromEnv(), tt.give).Err()
			var ce *fxmodule.ConfigError
			if !errors.As(err, &ce) || ce.Field != "ZKServers" {
				t.Fatalf("build error = %v, want a *ConfigError for ZKServers", err)
			}
			for _, env := range tt.want {
				if !strings.Contains(ce.Want, env) {
					t.Errorf("the error does not name %s: %v", env, err)
				}
			}
			if tt.name != "a gRPC provider" && strings.Contains(ce.Want, fxmodule.EnvGRPCPort) {
				t.Errorf("the error asks for %s of an app without a *grpc.Server: %v", fxmodule.EnvGRPCPort, err)
			}
		})
	}
}

// lockedBuffer is a log destination the provider's goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Without a *slog.Logger in the app, gracekit logs through slog.Default():
// the registration and the stop steps are there.
func TestWithoutALoggerTheModuleLogsToSlogDefault(t *testing.T) {
	var buf lockedBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	zkc := sharedZK(t)
	app := fxtest.New(t, fx.Supply(providerConfig(zkc, "quote-1", testutil.FreePort(t))), fx.Provide(helloServer), fxmodule.Discovery)
	app.RequireStart()
	if !strings.Contains(buf.String(), "msg=registered") {
		t.Errorf("no registration in slog.Default()'s output after start:\n%s", buf.String())
	}
	app.RequireStop()
	for _, step := range []string{"step=registration phase=stop", "step=quiesce phase=stop", "step=session phase=stop"} {
		if !strings.Contains(buf.String(), step) {
			t.Errorf("no %q in slog.Default()'s output after stop:\n%s", step, buf.String())
		}
	}
}
