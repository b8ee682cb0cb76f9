package fxmodule

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync/atomic"
	"syscall"

	"go.uber.org/dig"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
)

// Logger is fx's event logger for an app built with gracekit, over the
// app's *slog.Logger (slog.Default() without one), so that what a user
// sees first are the library's lines and what went wrong, each once:
//
//   - fx's own events (provided, invoked, hook executed...) go at debug;
//   - the signal that ends App.Run is one info line, "signal received;
//     stopping", with the signal;
//   - a start or stop hook that failed is one error line naming the hook
//     (fx's summary of the same error, "start failed", goes at debug);
//   - what fx.New failed on (a missing or bad setting, a missing type) is
//     left to App.Err, which the app checks before Run, printing Cause and
//     exiting 1, so that it is said once, plainly; fx would log it at
//     each of three events, in its wrapping, with a stack trace. An app
//     that calls Run without checking gets it once, at error, from Run.
//
// Use it in place of fx.WithLogger:
//
//	app := fx.New(fxmodule.Logger, fxmodule.FromEnv(), fx.Provide(newServer), fxmodule.Discovery)
//	if err := app.Err(); err != nil {
//		fmt.Fprintln(os.Stderr, fxmodule.Cause(err))
//		os.Exit(1)
//	}
//	app.Run()
var Logger = fx.WithLogger(newEventLogger)

type eventLoggerParams struct {
	fx.In

	Logger *slog.Logger `optional:"true"`
}

func newEventLogger(p eventLoggerParams) fxevent.Logger {
	l := p.Logger
	if l == nil {
		l = slog.Default()
	}
	debug := &fxevent.SlogLogger{Logger: l}
	debug.UseLogLevel(slog.LevelDebug)
	debug.UseErrorLevel(slog.LevelDebug)
	return &eventLogger{log: l, debug: debug}
}

// eventLogger is Logger's fxevent.Logger. fx calls LogEvent from the
// goroutines of App.Start and App.Stop and of their hooks.
type eventLogger struct {
	log   *slog.Logger
	debug *fxevent.SlogLogger // every event not handled here, at debug

	startHookFailed, stopHookFailed atomic.Bool // said already: the summary that repeats it goes at debug
}

func (l *eventLogger) LogEvent(event fxevent.Event) {
	ctx := context.Background()
	switch e := event.(type) {
	case *fxevent.Stopping:
		l.log.LogAttrs(ctx, slog.LevelInfo, "signal received; stopping", slog.String("signal", signalName(e.Signal)))
		return
	case *fxevent.OnStartExecuted:
		if e.Err != nil {
			l.startHookFailed.Store(true)
			l.log.LogAttrs(ctx, slog.LevelError, "start hook failed",
				slog.String("callee", e.FunctionName), slog.String("caller", e.CallerName), slog.Any("err", e.Err))
			return
		}
	case *fxevent.OnStopExecuted:
		if e.Err != nil {
			l.stopHookFailed.Store(true)
			l.log.LogAttrs(ctx, slog.LevelError, "stop hook failed",
				slog.String("callee", e.FunctionName), slog.String("caller", e.CallerName), slog.Any("err", e.Err))
			return
		}
	case *fxevent.Started:
		if e.Err != nil && !l.startHookFailed.Load() {
			l.log.LogAttrs(ctx, slog.LevelError, "start failed", slog.Any("err", Cause(e.Err)))
			return
		}
	case *fxevent.RolledBack:
		if e.Err != nil && !l.stopHookFailed.Load() {
			l.log.LogAttrs(ctx, slog.LevelError, "rollback failed", slog.Any("err", e.Err))
			return
		}
	case *fxevent.Stopped:
		if e.Err != nil && !l.stopHookFailed.Load() {
			l.log.LogAttrs(ctx, slog.LevelError, "stop failed", slog.Any("err", e.Err))
			return
		}
	case *fxevent.LoggerInitialized:
		if e.Err != nil {
			l.log.LogAttrs(ctx, slog.LevelError, "fx logger initialization failed", slog.Any("err", e.Err))
			return
		}
	}
	l.debug.LogEvent(event)
}

// signalName is SIGTERM for syscall.SIGTERM (whose String is
// "terminated"), SIGINT for an interrupt.
func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case nil:
		return ""
	}
	return s.String()
}

// Cause returns what a failed fx.New is about, without fx's and dig's
// wrapping (the function, the type it failed to build, the file and
// line): the *ConfigError when there is one, such as the required
// settings left unset, otherwise the first error in the chain that dig
// did not make (what a constructor returned), or dig's own innermost
// error (a missing type). It returns nil for nil and leaves an error
// that is none of fx's as it is.
func Cause(err error) error {
	if err == nil {
		return nil
	}
	var ce *ConfigError
	if errors.As(err, &ce) {
		return ce
	}
	return dig.RootCause(err)
}
