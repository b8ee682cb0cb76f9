// Package flush is the flush protocol: a stopping provider asks gateways to
// evict it at once, rather than wait for ZooKeeper's watch to tell them.
//
// Provider side:
//
//   - Notifier tells every gateway to evict this instance (a signed POST per
//     target, in parallel, with go-retryablehttp), or calls Spring-style
//     flush endpoints, and reports per target. shutdown.Sequence calls it
//     in its flush step, after deregistering.
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
// Options are typed per constructor: a NotifierOption goes to NewNotifier,
// a HandlerOption to NewHandler, and passing one to the other does not
// compile. WithLogger returns an Option, which is both.
//
// # Signing
//
// A flush request carries HeaderTimestamp (Unix seconds, decimal),
// HeaderNonce (random, hex) and HeaderSignature, the hex HMAC-SHA256 with the
// shared secret of timestamp + "\n" + nonce + "\n" + body; see Sign. The
// body is a Request, which names the target URL (see Audience) and the
// registration's creation zxid, so a signature is good for one gateway and
// one registration only. Every attempt, retries included, is signed afresh,
// so a retry is never a replay.
package flush
