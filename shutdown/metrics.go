package shutdown

import (
	"fmt"

	"github.com/go-kit/kit/metrics"
)

// Flush call outcomes and kinds, the labels of FlushCounter.
const (
	FlushAcked  = "acked"  // the target answered 2xx
	FlushFailed = "failed" // it did not, after the retries
	KindSigned  = "signed" // a signed POST (StaticTargets, Targets)
	KindSpring  = "spring" // a Spring-style GET (SpringTargets)
)

// FlushCounter counts a Notifier's flush calls, one per target per Flush,
// with the labels "kind" (KindSigned or KindSpring) and "outcome"
// (FlushAcked or FlushFailed).
func FlushCounter(c metrics.Counter) Option {
	return option{"FlushCounter", forNotifier, func(o *options) error {
		if c == nil {
			return fmt.Errorf("shutdown: nil flush counter")
		}
		o.flushes = c
		return nil
	}}
}

// countFlush counts one target's outcome.
func (n *Notifier) countFlush(rep FlushReport) {
	if n.opts.flushes == nil {
		return
	}
	kind, outcome := KindSigned, FlushAcked
	if rep.Spring {
		kind = KindSpring
	}
	if !rep.Acked {
		outcome = FlushFailed
	}
	n.opts.flushes.With("kind", kind, "outcome", outcome).Add(1)
}
