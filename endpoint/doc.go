// Package endpoint turns a go-kit service discovery Instancer into
// load-balanced, retrying, outlier-aware go-kit endpoints, so that a client
// sees no failed request while the instances behind it restart.
//
// It follows go-kit's chain and drops into it at every step:
//
//	Instancer → Factory → Endpointer → Balancer → Retry
//
// [NewEndpointer] subscribes to a go-kit sd.Instancer and builds one endpoint
// per instance with an sd.Factory, like go-kit's sd.NewEndpointer, except
// that a removed instance's io.Closer runs only after the calls in flight on
// it have finished, and that [Endpointer.Evict] removes an instance at once
// (a gateway's flush handler calls it when a provider stops).
//
// The balancers ([RoundRobin], [Random], [P2C] and [Sticky]) implement
// go-kit's lb.Balancer, pick without allocating, and never return an
// instance that is ejected or closing while another is available. An
// instance is closing once one of its responses carried [ClosingHeader];
// it is ejected after consecutive connect failures (passive outlier
// ejection, see [EjectAfter]).
//
// [NewRetry] returns a go-kit endpoint that retries only retryable failures
// (see [Classify]) on a different instance, with jittered exponential backoff
// and a Finagle-style [RetryBudget]. A failed call returns a [*RetryError]
// through which errors.Is and errors.As reach every attempt's cause.
//
// [HTTPFactory] builds go-kit transport/http clients that share one tuned
// http.Transport and report 503s and the closing signal to the layers above.
//
// The package name is the same as go-kit's endpoint package; import go-kit's
// packages under the aliases kitendpoint, kitsd and kitlb.
package endpoint
