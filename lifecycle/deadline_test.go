package lifecycle_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gracekit/gracekit/lifecycle"
)

// seen records the deadline and the end of each stop call.
type seen struct {
	mu        sync.Mutex
	deadlines map[string]time.Time
}

func (s *seen) step(name string, always bool, timeout time.Duration, stop func(context.Context) error) lifecycle.Step {
	return lifecycle.Step{
		Name: name, Start: ok, StopTimeout: timeout, Always: always,
		Stop: func(ctx context.Context) error {
			dl, _ := ctx.Deadline()
			s.mu.Lock()
			if s.deadlines == nil {
				s.deadlines = map[string]time.Time{}
			}
			s.deadlines[name] = dl
			s.mu.Unlock()
			return stop(ctx)
		},
	}
}

func (s *seen) deadline(name string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dl, ok := s.deadlines[name]
	return dl, ok
}

// Issue 8, case 16: under a stop deadline shorter than the stop timeouts
// (fx abandons OnStop at its deadline), the Always steps still all run,
// each bounded so that Stop returns before the deadline, and the other
// steps only get what is left.
func TestEngineStopFitsTheAlwaysStepsInsideAShortDeadline(t *testing.T) {
	var s seen
	// Stop order: readiness, status, registration, flush, quiesce, drain, session.
	steps := []lifecycle.Step{
		s.step("session", true, time.Second, block),
		s.step("drain", true, 4*time.Second, block),
		s.step("quiesce", false, 2*time.Second, block),
		s.step("flush", false, 3*time.Second, block),
		s.step("registration", true, 2*time.Second, block),
		s.step("status", false, 2*time.Second, block),
		s.step("readiness", true, 100*time.Millisecond, ok),
	}
	e, rec := newEngine(t, steps)
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	err := e.Stop(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Stop returned after its ctx's deadline (%v late)", time.Since(deadline))
	}
	if !errors.Is(err, lifecycle.ErrSkipped) {
		t.Errorf("Stop = %v, want skipped steps", err)
	}
	equal(t, rec.trace()[7:], []string{
		"stop:readiness", "stop:status-", "stop:registration!", "stop:flush-", "stop:quiesce-", "stop:drain!", "stop:session!",
	})
	for _, name := range []string{"readiness", "registration", "drain", "session"} {
		dl, ran := s.deadline(name)
		if !ran || !dl.Before(deadline) {
			t.Errorf("the Always step %s ran: %v, with a deadline %v before the stop's, want it to run within it", name, ran, deadline.Sub(dl))
		}
	}
	// The bounds are shared in proportion to the steps' timeouts.
	var bounds = map[string]time.Duration{}
	for _, ev := range rec.events {
		if ev.Phase == lifecycle.PhaseStop {
			bounds[ev.Step] = ev.Bound
		}
	}
	if bounds["drain"] <= bounds["registration"] || bounds["registration"] <= bounds["session"] {
		t.Errorf("bounds %v, want drain > registration > session", bounds)
	}
}

// Issue 8, case 16: with a stop deadline long enough for every step, each
// step keeps its own timeout.
func TestEngineStopKeepsTheStepTimeoutsWhenTheDeadlineLeavesEnough(t *testing.T) {
	steps := []lifecycle.Step{
		{Name: "session", Stop: ok, StopTimeout: time.Second, Always: true},
		{Name: "flush", Stop: ok, StopTimeout: 2 * time.Second},
		{Name: "registration", Stop: ok, StopTimeout: 2 * time.Second, Always: true},
	}
	e, rec := newEngine(t, steps)
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), lifecycle.DefaultStopBudget)
	defer cancel()
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ev := range rec.events {
		if ev.Phase == lifecycle.PhaseStop && ev.Bound != steps[map[string]int{"session": 0, "flush": 1, "registration": 2}[ev.Step]].StopTimeout {
			t.Errorf("step %s ran with a bound of %s, want its own timeout", ev.Step, ev.Bound)
		}
	}
	if got := e.StopTotal(); got != 5*time.Second {
		t.Errorf("StopTotal = %s, want 5s", got)
	}
}

// Issue 8, case 16: a Stop that starts with an expired ctx still runs the
// Always steps, with their own timeouts, and skips the others.
func TestEngineStopWithAnExpiredContextRunsTheAlwaysSteps(t *testing.T) {
	var ran sync.Map
	mark := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			ran.Store(name, ctx.Err())
			return nil
		}
	}
	steps := []lifecycle.Step{
		{Name: "drain", Stop: mark("drain"), Always: true},
		{Name: "flush", Stop: mark("flush")},
		{Name: "readiness", Stop: mark("readiness"), Always: true},
	}
	e, rec := newEngine(t, steps)
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.Stop(ctx); !errors.Is(err, lifecycle.ErrSkipped) || !errors.Is(err, context.Canceled) {
		t.Errorf("Stop = %v, want flush skipped for the canceled ctx", err)
	}
	equal(t, rec.trace(), []string{"stop:readiness", "stop:flush-", "stop:drain"})
	for _, name := range []string{"readiness", "drain"} {
		if err, ok := ran.Load(name); !ok || err != nil {
			t.Errorf("step %s ran: %v, with ctx error %v; want it run on a live context", name, ok, err)
		}
	}
}

// Issue 8, case 17: a start step's bound ends before the start ctx's
// deadline, so that the step's own error (a registration conflict, say)
// reaches the caller before it gives up, as fx does at its start timeout.
func TestEngineStartStepEndsBeforeTheStartDeadline(t *testing.T) {
	errConflict := errors.New("node held by another session")
	var stepDeadline time.Time
	waits := lifecycle.Step{
		Name: "registration",
		// Waits for the other holder to go, and says why it gave up.
		Start: func(ctx context.Context) error {
			stepDeadline, _ = ctx.Deadline()
			<-ctx.Done()
			return errors.Join(errConflict, ctx.Err())
		},
		Stop:         ok,
		StartTimeout: 15 * time.Second, // as long as fx's default start timeout
	}
	e, rec := newEngine(t, []lifecycle.Step{step("listen"), waits})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	err := e.Start(ctx)
	if !errors.Is(err, errConflict) {
		t.Fatalf("Start = %v, want the step's error", err)
	}
	if !stepDeadline.Before(deadline) {
		t.Errorf("the step's deadline is %v after the start's, want it before", stepDeadline.Sub(deadline))
	}
	if ctx.Err() != nil {
		t.Errorf("Start returned %v after its ctx's deadline", time.Since(deadline))
	}
	equal(t, rec.trace(), []string{"start:listen", "start:registration!", "stop:listen"})
}
