// Package shutdown stops a go-kit service behind ZooKeeper without failed
// requests, and lets gateways evict a stopping instance at once.
//
// Provider side:
//
//   - Readiness serves /readyz and /livez: not ready until registration
//     succeeded, 503 from the first stop step on.
//   - Tracker counts requests in flight (net/http and go-kit endpoint
//     middleware), keeps the time of the last arrival, counts requests that
//     arrive after deregistration, sets endpoint.ClosingHeader on responses
//     once draining, and Drain waits for zero in flight.
//   - Notifier tells every gateway to evict this instance (a signed POST per
//     target, in parallel, with go-retryablehttp), or calls Spring-style
//     flush endpoints, and reports per target.
//   - Sequence assembles these and a Registrar into lifecycle steps:
//     start = listen, serve, ready check, register, ready;
//     stop = unready, out of service, deregister, flush, quiesce, drain,
//     close session. Deregister and close session always run. A Report
//     tells what happened.
//
// Gateway side:
//
//   - Handler verifies a flush request (HMAC-SHA256 signature, timestamp
//     window, nonce not seen before, bounded body) and answers 200 only once
//     its Evicter returned.
//
// # Signing
//
// A flush request carries HeaderTimestamp (Unix seconds, decimal),
// HeaderNonce (random, hex) and HeaderSignature, the hex HMAC-SHA256 with the
// shared secret of timestamp + "\n" + nonce + "\n" + body; see Sign. Every
// attempt, retries included, is signed afresh, so a retry is never a replay.
package shutdown
