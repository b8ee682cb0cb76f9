package lifecycle

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

var (
	// ErrStarted is returned by a second call to Start.
	ErrStarted = errors.New("lifecycle: already started")
	// ErrStopped is returned by Start after Stop.
	ErrStopped = errors.New("lifecycle: already stopped")
	// ErrSkipped is wrapped by the error of a stop step that did not run
	// because the stop context had expired.
	ErrSkipped = errors.New("lifecycle: step skipped")
	// ErrOverBudget is what a *BudgetError unwraps to.
	ErrOverBudget = errors.New("lifecycle: stop timeouts exceed the stop budget")
)

// StepError is the error of one step phase.
type StepError struct {
	Step  string
	Phase Phase
	Err   error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("lifecycle: %s step %q: %v", e.Phase, e.Step, e.Err)
}

// Unwrap returns the step's error.
func (e *StepError) Unwrap() error { return e.Err }

// StepBound is one step's stop timeout, as counted in a BudgetError.
type StepBound struct {
	Step    string
	Timeout time.Duration
}

// BudgetError says that the steps' stop timeouts add up to more than the
// stop budget.
type BudgetError struct {
	Steps  []StepBound
	Sum    time.Duration
	Budget time.Duration
}

func (e *BudgetError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lifecycle: stop timeouts sum to %s, over the stop budget of %s (", e.Sum, e.Budget)
	for i, s := range e.Steps {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", s.Step, s.Timeout)
	}
	b.WriteString(")")
	return b.String()
}

// Unwrap returns ErrOverBudget.
func (e *BudgetError) Unwrap() error { return ErrOverBudget }
