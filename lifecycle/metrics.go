package lifecycle

import "github.com/go-kit/kit/metrics"

// Outcomes, the "outcome" label of HistogramListener.
const (
	OutcomeOK      = "ok"
	OutcomeError   = "error"
	OutcomeSkipped = "skipped"
)

// HistogramListener returns a Listener that observes each step phase's
// duration, in seconds, in h (any go-kit metrics backend), with the labels
// "step" (the step's name), "phase" ("start", "stop", or "rollback" for a
// stop that undoes a failed Start) and "outcome" (OutcomeOK, OutcomeError,
// or OutcomeSkipped, observed as 0 s). A nil h observes nothing. Like
// every Listener it is called from the goroutine running Start or Stop; it
// blocks only as long as h.Observe does.
func HistogramListener(h metrics.Histogram) Listener {
	return func(e Event) {
		if h == nil {
			return
		}
		phase := string(e.Phase)
		if e.Rollback {
			phase = "rollback"
		}
		outcome := OutcomeOK
		switch {
		case e.Skipped:
			outcome = OutcomeSkipped
		case e.Err != nil:
			outcome = OutcomeError
		}
		h.With("step", e.Step, "phase", phase, "outcome", outcome).Observe(e.Duration.Seconds())
	}
}
