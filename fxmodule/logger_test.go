package fxmodule_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/fx"

	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/internal/testutil"
)

// Issue 39, item 5: with fxmodule.Logger, an app built with nothing set
// logs nothing at info or above while fx.New fails: the error is App.Err's,
// and Cause gives it plainly, the *ConfigError naming every variable to
// set, without fx's and dig's wrapping. An app that calls Start anyway
// gets it once, at error.
func TestLoggerLeavesTheBuildErrorToErrAndCauseSaysItPlainly(t *testing.T) {
	clearGracekitEnv(t)
	logs, log := testutil.NewLogs()
	app := fx.New(fxmodule.Logger, fx.Supply(log), fxmodule.FromEnv(), fx.Provide(helloServer), fxmodule.Discovery)
	err := app.Err()
	if err == nil {
		t.Fatal("fx.New with nothing set: no error")
	}
	if got := logs.All(slog.LevelInfo); len(got) != 0 {
		t.Errorf("fx.New logged %d lines at info or above, want none (the error is App.Err's):\n%s", len(got), logs)
	}
	cause := fxmodule.Cause(err)
	var ce *fxmodule.ConfigError
	if !errors.As(cause, &ce) || cause != error(ce) {
		t.Fatalf("Cause(%v) = %v, want the *ConfigError itself", err, cause)
	}
	want := []string{fxmodule.EnvZKServers, fxmodule.EnvService, fxmodule.EnvAddress, fxmodule.EnvPort}
	if strings.Join(ce.Unset, ",") != strings.Join(want, ",") {
		t.Errorf("ConfigError.Unset = %v, want %v", ce.Unset, want)
	}
	msg := cause.Error()
	if !strings.HasPrefix(msg, "fxmodule: required settings unset: GRACEKIT_ZK_SERVERS, GRACEKIT_SERVICE, GRACEKIT_ADDRESS, GRACEKIT_PORT (Config.ZKServers, Config.Service, Config.Address, Config.Port; for a local try: ") ||
		!strings.Contains(msg, "docs/CONFIG.md") || strings.Contains(msg, "discovery.go") || len(msg) > 360 {
		t.Errorf("Cause's message %q: want the variables, a local try and docs/CONFIG.md, under 360 characters, no fx wrapping", msg)
	}

	if err := app.Start(context.Background()); err == nil {
		t.Fatal("Start after a failed build: nil error")
	}
	errs := logs.All(slog.LevelInfo)
	if len(errs) != 1 || errs[0].Level != slog.LevelError || errs[0].Attrs["err"] != msg {
		t.Errorf("Start after a failed build logged at info or above:\n%s\nwant one error line with the plain cause %q", logs, msg)
	}
}

// Issue 39, item 5: a start hook that fails is one error line naming the
// hook, a stop hook that fails another; fx's summaries of the same errors
// stay at debug.
func TestLoggerSaysAFailedHookOnce(t *testing.T) {
	logs, log := testutil.NewLogs()
	errStart, errStop := errors.New("start boom"), errors.New("stop boom")
	app := fx.New(fxmodule.Logger, fx.Supply(log), fx.Invoke(func(lc fx.Lifecycle) {
		lc.Append(fx.Hook{OnStop: func(context.Context) error { return errStop }})
		lc.Append(fx.Hook{OnStart: func(context.Context) error { return errStart }})
	}))
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	if err := app.Start(context.Background()); !errors.Is(err, errStart) {
		t.Fatalf("Start = %v, want %v", err, errStart)
	}
	got := logs.All(slog.LevelInfo)
	if len(got) != 2 || got[0].Message != "start hook failed" || got[0].Attrs["err"] != "start boom" ||
		got[1].Message != "stop hook failed" || got[1].Attrs["err"] != "stop boom" || got[0].Level != slog.LevelError || got[1].Level != slog.LevelError {
		t.Errorf("a failed start and its rollback logged at info or above:\n%s\nwant one error line per failed hook", logs)
	}
	if len(logs.All(slog.LevelDebug)) <= 2 {
		t.Errorf("fx's own events are not at debug:\n%s", logs)
	}
}

// Issue 39, item 6: the signal that ends Run is one info line; fx's
// other events of a clean run stay at debug.
func TestLoggerSaysTheSignalAtInfo(t *testing.T) {
	logs, log := testutil.NewLogs()
	app := fx.New(fxmodule.Logger, fx.Supply(log), fx.Invoke(func(lc fx.Lifecycle, s fx.Shutdowner) {
		lc.Append(fx.Hook{OnStart: func(context.Context) error { return s.Shutdown() }})
	}))
	app.Run() // Shutdown sends SIGTERM, as fx says it
	got := logs.All(slog.LevelInfo)
	if len(got) != 1 || got[0].Message != "signal received; stopping" || got[0].Attrs["signal"] != "SIGTERM" || got[0].Level != slog.LevelInfo {
		t.Errorf("a run ended by SIGTERM logged at info or above:\n%s\nwant one info line with signal=SIGTERM", logs)
	}
}
