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
//     close session. Unready, deregister, drain and close session always
//     run, and fit inside the stop context's deadline (the other steps get
//     what is left, or are skipped). Requests still in flight when the
//     drain's bound ends are cut and reported (Report.CutByDrain,
//     *DrainError). A Report tells what happened.
//
// Gateway side:
//
//   - Handler verifies a flush request (JSON content type, bounded body,
//     HMAC-SHA256 signature, timestamp window, its own URL as the target,
//     nonce not seen before) and answers 200 once its Evicter evicted the
//     registration named, or 202 with the reason nothing was evicted (not
//     listed, another registration, a service it does not route).
//   - DiscoveryEvicter evicts only a registration the gateway's Instancer
//     lists, from the Instancer and its endpointers.
//   - ParseSpringQuery reads a Spring-style flush query.
//
// # Signing
//
// A flush request carries HeaderTimestamp (Unix seconds, decimal),
// HeaderNonce (random, hex) and HeaderSignature, the hex HMAC-SHA256 with the
// shared secret of timestamp + "\n" + nonce + "\n" + body; see Sign. The
// body is a FlushRequest, which names the target URL (see Audience) and the
// registration's creation zxid, so a signature is good for one gateway and
// one registration only. Every attempt, retries included, is signed afresh,
// so a retry is never a replay.
package shutdown
