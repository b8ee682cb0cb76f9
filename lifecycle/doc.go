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
// The caller's deadline bounds the steps, since a caller such as fx stops
// waiting at its deadline (and the process then exits):
//
//   - At start, each step's bound ends a margin before the deadline (a
//     tenth of the time left, at most 1 s), so that the caller gets the
//     step's own error, not its deadline error.
//   - At stop, the steps marked Step.Always (marking the instance
//     unready, deregistering, draining, closing the ZooKeeper session) have
//     their time reserved: the other steps only get what is left of the
//     time before the deadline, or are skipped. A deadline shorter than the
//     Always steps' timeouts is shared among them in proportion to those
//     timeouts. Stop keeps a margin (a tenth of the time left, at most
//     250 ms), so it returns before the deadline as long as every step
//     honors its context.
//   - A stop context that is already done (expired, or canceled) skips the
//     remaining steps except the Always ones, which run with their own
//     full timeouts on a context that is not canceled; a caller that gave
//     up may not see them finish.
//
// New checks at construction that the stop timeouts add up to no more than
// the stop budget (StopBudget, DefaultStopBudget by default, fx's default stop
// timeout); a plan that cannot fit returns a *BudgetError.
//
// Each step phase that ends, or is skipped, is reported as an Event to the
// Listeners given with WithListener; SlogListener adapts a *slog.Logger.
package lifecycle
