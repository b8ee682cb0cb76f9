// Package lifecycle runs an ordered list of steps at start and stops them in
// reverse at stop, each with its own timeout, within a total stop budget.
//
// It follows the semantics of uber-go/fx's internal lifecycle without
// importing fx:
//
//   - Start runs each Step's Start in order and halts at the first error. The
//     steps that started are then undone: their Stop runs in reverse order.
//   - Stop runs the Stop of the steps that started, and only those, in reverse
//     order. It keeps going past errors and returns them joined (errors.Join).
//   - Every call gets its own timeout (Step.StartTimeout, Step.StopTimeout)
//     derived from the caller's context.
//
// Unlike fx, an expired stop context does not end the stop: the remaining
// steps are skipped except those marked Step.Always, which still run with
// their own timeout on a fresh context. Deregistering from service discovery
// and closing the ZooKeeper session are such steps: a slow drain must not
// leave a stale registration behind.
//
// New checks at construction that the stop timeouts add up to no more than
// the stop budget (StopBudget, DefaultStopBudget by default, fx's default stop
// timeout); a plan that cannot fit returns a *BudgetError.
//
// Each step phase that ends, or is skipped, is reported as an Event to the
// Listeners given with WithListener; SlogListener adapts a *slog.Logger.
package lifecycle
