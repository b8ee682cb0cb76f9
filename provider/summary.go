package provider

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/gracekit/gracekit/shutdown"
)

// logStopSummary is the stop's last line, "stop done": every stop step in
// the order it ran with its time (shutdown.Step* names, those of the
// "lifecycle step" lines and of the step metric), the whole stop's time,
// and how many steps failed or were skipped, named. It is at info, or at
// warn when a step failed; the errors themselves are the step lines' and
// Stop's.
func (p *Provider) logStopSummary(r shutdown.Report, took time.Duration) {
	var steps, failed []string
	for _, s := range r.Steps {
		switch {
		case s.Skipped:
			steps = append(steps, s.Step+"=skipped")
			failed = append(failed, s.Step)
		default:
			steps = append(steps, s.Step+"="+s.Duration.Round(time.Millisecond).String())
			if s.Err != nil {
				failed = append(failed, s.Step)
			}
		}
	}
	attrs := []slog.Attr{
		slog.String("steps", strings.Join(steps, " ")),
		slog.Duration("duration", took.Round(time.Millisecond)),
		slog.Int("errors", len(failed)),
	}
	level := slog.LevelInfo
	if len(failed) > 0 {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("failed", strings.Join(failed, ",")))
	}
	if r.CutByDrain > 0 {
		attrs = append(attrs, slog.Int("cut_by_drain", r.CutByDrain))
	}
	p.log.LogAttrs(context.Background(), level, "stop done", attrs...)
}
