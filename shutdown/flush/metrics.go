package flush

import (
	"errors"
	"fmt"

	"github.com/go-kit/kit/metrics"
)

// Flush call outcomes and kinds, the labels of CallCounter.
const (
	OutcomeAcked  = "acked"  // the target answered 2xx
	OutcomeFailed = "failed" // it did not, after the retries
	KindSigned    = "signed" // a signed POST (StaticTargets, Targets)
	KindSpring    = "spring" // a Spring-style GET (SpringTargets)
)

// CallCounter counts a Notifier's flush calls, one per target per Flush,
// with the labels "kind" (KindSigned or KindSpring) and "outcome"
// (OutcomeAcked or OutcomeFailed).
func CallCounter(c metrics.Counter) NotifierOption {
	return notifierOption(func(o *notifierOptions) error {
		if c == nil {
			return errors.New("flush: nil call counter")
		}
		o.calls = c
		return nil
	})
}

// RefusalCounter counts the requests a Handler refuses, with a "reason"
// label (ReasonMethod and the other Reason constants). Refusals are also
// logged, at most one line per reason per second; the counter has them all.
func RefusalCounter(c metrics.Counter) HandlerOption {
	return handlerOption(func(o *handlerOptions) error {
		if c == nil {
			return fmt.Errorf("flush: nil refusal counter")
		}
		o.refusals = c
		return nil
	})
}

// ResultCounter counts the flush requests a Handler acknowledged, with a
// "result" label: a Result (evicted, not-listed, other-registration,
// not-routed).
func ResultCounter(c metrics.Counter) HandlerOption {
	return handlerOption(func(o *handlerOptions) error {
		if c == nil {
			return fmt.Errorf("flush: nil result counter")
		}
		o.results = c
		return nil
	})
}

// countCall counts one target's outcome.
func (n *Notifier) countCall(rep Report) {
	if n.opts.calls == nil {
		return
	}
	kind, outcome := KindSigned, OutcomeAcked
	if rep.Spring {
		kind = KindSpring
	}
	if !rep.Acked {
		outcome = OutcomeFailed
	}
	n.opts.calls.With("kind", kind, "outcome", outcome).Add(1)
}
