// Package shutdown stops a go-kit service behind ZooKeeper without failed
// requests: the provider's side of a graceful stop. The flush protocol,
// which tells gateways to evict a stopping instance at once, is in the
// sub-package flush.
//
//   - Readiness serves /readyz and /livez: not ready until registration
//     succeeded, 503 from the first stop step on.
//   - Tracker counts requests in flight (net/http and go-kit endpoint
//     middleware), keeps the time of the last arrival, counts requests that
//     arrive after deregistration, sets endpoint.ClosingHeader on responses
//     once draining, and Drain waits for zero in flight.
//   - Sequence assembles these, a Registration (an *sd.Registrar), a
//     Server and a *flush.Notifier into lifecycle steps:
//     start = listen, serve, ready check, register, ready;
//     stop = unready, out of service, deregister, flush, quiesce, drain,
//     close session. Unready, deregister, drain and close session always
//     run, and fit inside the stop context's deadline (the other steps get
//     what is left, or are skipped). Requests still in flight when the
//     drain's bound ends are cut and reported (Report.CutByDrain,
//     *DrainError). A Report tells what happened, with one flush.Report
//     per flush target.
//   - Server is what a Sequence serves and drains: an *http.Server, or a
//     gRPC server through the sub-package grpcstop.
package shutdown
