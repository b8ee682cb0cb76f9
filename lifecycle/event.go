package lifecycle

import (
	"context"
	"log/slog"
	"time"
)

// Phase is the half of a step an Event reports on.
type Phase string

// Phases of a step.
const (
	PhaseStart Phase = "start"
	PhaseStop  Phase = "stop"
)

// Event reports one step phase that ended, or was skipped.
type Event struct {
	// Step is the step's name.
	Step string
	// Phase is PhaseStart or PhaseStop.
	Phase Phase
	// Rollback is true for a stop that undoes a failed Start.
	Rollback bool
	// Begin is when the phase began.
	Begin time.Time
	// Bound is the timeout the phase ran with: the step's own, or less
	// when the caller's deadline was nearer; zero if skipped.
	Bound time.Duration
	// Duration is how long it ran; zero if skipped.
	Duration time.Duration
	// Skipped is true when the step is not Always and its Stop did not run:
	// the stop context had expired, or the time left before its deadline
	// was reserved for the Always steps.
	Skipped bool
	// Err is the phase's error, nil on success. A skipped step's Err wraps
	// ErrSkipped and the stop context's error.
	Err error
}

// Listener receives events. It is called synchronously from the goroutine
// running Start or Stop, one event at a time, and must not block.
type Listener func(Event)

// SlogListener returns a Listener that logs each event to l: at Info level
// on success, at Error level on failure or skip. Keys: step, phase,
// rollback, duration, err. A nil l logs nothing.
func SlogListener(l *slog.Logger) Listener {
	return func(e Event) {
		if l == nil {
			return
		}
		level, msg := slog.LevelInfo, "lifecycle step done"
		switch {
		case e.Skipped:
			level, msg = slog.LevelError, "lifecycle step skipped"
		case e.Err != nil:
			level, msg = slog.LevelError, "lifecycle step failed"
		}
		attrs := []slog.Attr{
			slog.String("step", e.Step),
			slog.String("phase", string(e.Phase)),
			slog.Duration("duration", e.Duration),
		}
		if e.Rollback {
			attrs = append(attrs, slog.Bool("rollback", true))
		}
		if e.Err != nil {
			attrs = append(attrs, slog.Any("err", e.Err))
		}
		l.LogAttrs(context.Background(), level, msg, attrs...)
	}
}
