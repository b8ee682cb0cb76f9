package lifecycle_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracekit/gracekit/lifecycle"
)

// recorder collects events as "phase:step" strings ("stop:b!" for a failed
// phase, "stop:b-" for a skipped one).
type recorder struct {
	mu     sync.Mutex
	events []lifecycle.Event
}

func (r *recorder) listen(e lifecycle.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) trace() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		s := string(e.Phase) + ":" + e.Step
		switch {
		case e.Skipped:
			s += "-"
		case e.Err != nil:
			s += "!"
		}
		out = append(out, s)
	}
	return out
}

func ok(context.Context) error { return nil }

func fail(context.Context) error { return errors.New("boom") }

// block waits for its context, like a call to a server that never answers.
func block(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func step(name string) lifecycle.Step {
	return lifecycle.Step{Name: name, Start: ok, Stop: ok, StartTimeout: time.Second, StopTimeout: time.Second}
}

func newEngine(t *testing.T, steps []lifecycle.Step, opts ...lifecycle.Option) (*lifecycle.Engine, *recorder) {
	t.Helper()
	rec := &recorder{}
	e, err := lifecycle.New(steps, append(opts, lifecycle.WithListener(rec.listen))...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e, rec
}

func equal(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("events:\n got  %v\n want %v", got, want)
	}
}

func TestEngineStartsInOrderAndStopsInReverse(t *testing.T) {
	e, rec := newEngine(t, []lifecycle.Step{step("a"), step("b"), step("c")})
	if err := e.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := e.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	equal(t, rec.trace(), []string{"start:a", "start:b", "start:c", "stop:c", "stop:b", "stop:a"})
}

func TestEngineStartFailure(t *testing.T) {
	tests := []struct {
		name string
		give lifecycle.Step
		want []string
	}{
		{
			name: "a failing middle step halts the start and undoes the steps before it",
			give: lifecycle.Step{Name: "b", Start: fail, Stop: ok},
			want: []string{"start:a", "start:b!", "stop:a"},
		},
		{
			name: "a middle step that times out halts the start and undoes the steps before it",
			give: lifecycle.Step{Name: "b", Start: block, Stop: ok, StartTimeout: 10 * time.Millisecond},
			want: []string{"start:a", "start:b!", "stop:a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, rec := newEngine(t, []lifecycle.Step{step("a"), tt.give, step("c")})
			err := e.Start(context.Background())
			var serr *lifecycle.StepError
			if !errors.As(err, &serr) || serr.Step != "b" || serr.Phase != lifecycle.PhaseStart {
				t.Fatalf("Start error = %v, want a start *StepError for b", err)
			}
			if err := e.Stop(context.Background()); err != nil {
				t.Errorf("Stop after a failed start: %v", err)
			}
			equal(t, rec.trace(), tt.want)
			if err := e.Start(context.Background()); !errors.Is(err, lifecycle.ErrStopped) {
				t.Errorf("Start again = %v, want ErrStopped", err)
			}
		})
	}
}

func TestEngineStopFailure(t *testing.T) {
	tests := []struct {
		name string
		give func(context.Context) error
		want []string
	}{
		{
			name: "a failing middle step does not skip the steps after it",
			give: fail,
			want: []string{"stop:d", "stop:c!", "stop:b", "stop:a"},
		},
		{
			name: "a middle step that times out does not skip the steps after it",
			give: block,
			want: []string{"stop:d", "stop:c!", "stop:b", "stop:a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := step("c")
			c.Stop, c.StopTimeout = tt.give, 10*time.Millisecond
			e, rec := newEngine(t, []lifecycle.Step{step("a"), step("b"), c, step("d")})
			if err := e.Start(context.Background()); err != nil {
				t.Fatalf("Start: %v", err)
			}
			err := e.Stop(context.Background())
			var serr *lifecycle.StepError
			if !errors.As(err, &serr) || serr.Step != "c" || serr.Phase != lifecycle.PhaseStop {
				t.Fatalf("Stop error = %v, want a stop *StepError for c", err)
			}
			got := rec.trace()[4:]
			equal(t, got, tt.want)
		})
	}
}

func TestEngineStopJoinsErrors(t *testing.T) {
	a, b := step("a"), step("b")
	errA, errB := errors.New("a failed"), errors.New("b failed")
	a.Stop = func(context.Context) error { return errA }
	b.Stop = func(context.Context) error { return errB }
	e, _ := newEngine(t, []lifecycle.Step{a, b})
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	err := e.Stop(context.Background())
	if !errors.Is(err, errA) || !errors.Is(err, errB) {
		t.Errorf("Stop = %v, want both errors", err)
	}
}

func TestEngineAlwaysStepsRunAfterTheStopContextExpired(t *testing.T) {
	var alwaysCtxErr error
	dereg := step("deregister")
	dereg.Always = true
	dereg.Stop = func(ctx context.Context) error {
		alwaysCtxErr = ctx.Err()
		return nil
	}
	drain := step("drain")
	drain.Stop = block
	drain.StopTimeout = 5 * time.Second
	steps := []lifecycle.Step{step("session"), step("flush"), dereg, step("quiesce"), drain}
	steps[0].Always = true
	e, rec := newEngine(t, steps)
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := e.Stop(ctx)
	if !errors.Is(err, lifecycle.ErrSkipped) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop = %v, want ErrSkipped and DeadlineExceeded", err)
	}
	// The drain is not Always: the 20 ms left are reserved for the steps
	// that are, so it is skipped rather than run into the deadline.
	equal(t, rec.trace()[5:], []string{"stop:drain-", "stop:quiesce-", "stop:deregister", "stop:flush-", "stop:session"})
	if alwaysCtxErr != nil {
		t.Errorf("an Always step got a done context: %v", alwaysCtxErr)
	}
}

func TestEngineStopIsIdempotent(t *testing.T) {
	var stops int
	a := step("a")
	a.Stop = func(context.Context) error { stops++; return errors.New("x") }
	e, _ := newEngine(t, []lifecycle.Step{a})
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); !errors.Is(err, lifecycle.ErrStarted) {
		t.Errorf("second Start = %v, want ErrStarted", err)
	}
	first := e.Stop(context.Background())
	second := e.Stop(context.Background())
	if first == nil || second != first {
		t.Errorf("Stop twice = %v, %v; want the same error twice", first, second)
	}
	if stops != 1 {
		t.Errorf("the step stopped %d times, want 1", stops)
	}
}

func TestEngineStopBeforeStartDoesNothing(t *testing.T) {
	e, rec := newEngine(t, []lifecycle.Step{step("a")})
	if err := e.Stop(context.Background()); err != nil {
		t.Errorf("Stop = %v", err)
	}
	if len(rec.trace()) != 0 {
		t.Errorf("events: %v", rec.trace())
	}
}

func TestEngineStopDuringStartWaitsAndStopsWhatStarted(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	b := step("b")
	b.Start = func(context.Context) error {
		close(entered)
		<-release
		return nil
	}
	e, rec := newEngine(t, []lifecycle.Step{step("a"), b})
	started := make(chan error, 1)
	go func() { started <- e.Start(context.Background()) }()
	<-entered
	stopped := make(chan error, 1)
	go func() { stopped <- e.Stop(context.Background()) }()
	close(release)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	equal(t, rec.trace(), []string{"start:a", "start:b", "stop:b", "stop:a"})
}

func TestNewRejectsABudgetThatCannotFit(t *testing.T) {
	a, b := step("drain"), step("close")
	a.StopTimeout, b.StopTimeout = 10*time.Second, 6*time.Second
	_, err := lifecycle.New([]lifecycle.Step{b, a, {Name: "no-stop", Start: ok}})
	var berr *lifecycle.BudgetError
	if !errors.As(err, &berr) {
		t.Fatalf("New = %v, want a *BudgetError", err)
	}
	if !errors.Is(err, lifecycle.ErrOverBudget) {
		t.Errorf("errors.Is(err, ErrOverBudget) = false")
	}
	want := &lifecycle.BudgetError{
		Steps:  []lifecycle.StepBound{{Step: "drain", Timeout: 10 * time.Second}, {Step: "close", Timeout: 6 * time.Second}},
		Sum:    16 * time.Second,
		Budget: lifecycle.DefaultStopBudget,
	}
	if fmt.Sprint(berr) != fmt.Sprint(want) {
		t.Errorf("got  %v\nwant %v", berr, want)
	}
	t.Log(err)

	if _, err := lifecycle.New([]lifecycle.Step{a, b}, lifecycle.StopBudget(16*time.Second)); err != nil {
		t.Errorf("a budget that fits exactly: %v", err)
	}
}

func TestNewRejectsInvalidInput(t *testing.T) {
	tests := []struct {
		name  string
		give  []lifecycle.Step
		opts  []lifecycle.Option
		wantE string
	}{
		{name: "a step without a name", give: []lifecycle.Step{{}}, wantE: "lifecycle: step 0 has no name"},
		{name: "two steps with the same name", give: []lifecycle.Step{step("a"), step("a")}, wantE: `lifecycle: duplicate step name "a"`},
		{name: "a negative start timeout", give: []lifecycle.Step{{Name: "a", StartTimeout: -1}}, wantE: `lifecycle: step "a": invalid start timeout -1ns (must not be negative)`},
		{name: "a negative stop timeout", give: []lifecycle.Step{{Name: "a", StopTimeout: -1}}, wantE: `lifecycle: step "a": invalid stop timeout -1ns (must not be negative)`},
		{name: "a zero stop budget", opts: []lifecycle.Option{lifecycle.StopBudget(0)}, wantE: "lifecycle: invalid stop budget 0s (must be positive)"},
		{name: "a nil listener", opts: []lifecycle.Option{lifecycle.WithListener(nil)}, wantE: "lifecycle: nil listener"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := lifecycle.New(tt.give, tt.opts...)
			if err == nil || err.Error() != tt.wantE {
				t.Errorf("New = %v, want %q", err, tt.wantE)
			}
		})
	}
}

func TestSlogListener(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "duration" {
				return slog.Attr{}
			}
			return a
		},
	}))
	b := step("b")
	b.Stop = fail
	e, err := lifecycle.New([]lifecycle.Step{step("a"), b}, lifecycle.WithListener(lifecycle.SlogListener(l)))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = e.Stop(context.Background())
	want := `level=INFO msg="lifecycle step done" step=a phase=start
level=INFO msg="lifecycle step done" step=b phase=start
level=ERROR msg="lifecycle step failed" step=b phase=stop err="lifecycle: stop step \"b\": boom"
level=INFO msg="lifecycle step done" step=a phase=stop
`
	if buf.String() != want {
		t.Errorf("log:\n%s\nwant:\n%s", buf.String(), want)
	}
	lifecycle.SlogListener(nil)(lifecycle.Event{}) // a nil logger is silent
}
