package endpoint

import (
	"context"
	"errors"
	"fmt"

	kitendpoint "github.com/go-kit/kit/endpoint"
	"github.com/go-kit/kit/metrics"
)

// Retry reasons, the "reason" label of [WithRetryReasonCounter]: why a
// failed attempt was repeated.
const (
	// RetryNotSent: the failure never reached an instance ([NotSent]).
	RetryNotSent = "not-sent"
	// RetryRetryable: the failure may have reached the instance
	// ([Retryable]) and the request is idempotent.
	RetryRetryable = "retryable"
	// RetryAttemptTimeout: the attempt ran out of its [AttemptTimeout].
	RetryAttemptTimeout = "attempt-timeout"
	// RetryPredicate: the [RetryIf] predicate asked for it.
	RetryPredicate = "retry-if"
)

// Failure reasons, the "reason" label of [WithFailureReasonCounter]: why a
// call that failed stopped retrying ([RetryError.Reason]).
const (
	FailureAttemptsExhausted = "attempts-exhausted" // ErrAttemptsExhausted
	FailureBudgetExhausted   = "budget-exhausted"   // ErrBudgetExhausted
	FailureNotRetryable      = "not-retryable"      // ErrNotRetryable
	FailureNonIdempotent     = "non-idempotent"     // ErrNonIdempotent
	FailureCanceled          = "canceled"           // the caller's context was canceled
	FailureDeadline          = "deadline"           // the caller's context deadline passed
)

// Ejection reasons, the "reason" label of [WithEjectionReasonCounter]: why
// an instance was taken out of rotation while discovery may still list it.
const (
	// EjectConnectFailures: consecutive connect failures ([EjectAfter]).
	EjectConnectFailures = "connect-failures"
	// EjectClosing: a response carried the closing signal ([ClosingHeader]).
	EjectClosing = "closing"
	// EjectEvicted: [Endpointer.Evict], as a gateway's flush handler does.
	EjectEvicted = "evicted"
)

// WithRetryReasonCounter counts retries (attempts after the first) with a
// "reason" label: RetryNotSent, RetryRetryable, RetryAttemptTimeout or
// RetryPredicate. It may be given with [WithRetryCounter], which counts
// the same retries without a label.
func WithRetryReasonCounter(c metrics.Counter) RetryOption {
	return retryOptionFunc(func(o *retryOptions) error {
		if c == nil {
			return fmt.Errorf("endpoint: retry reason counter is nil")
		}
		o.retryReasons = c
		return nil
	})
}

// WithFailureReasonCounter counts the calls that failed, with a "reason"
// label: FailureAttemptsExhausted, FailureBudgetExhausted,
// FailureNotRetryable, FailureNonIdempotent, FailureCanceled or
// FailureDeadline. A successful call costs nothing more.
func WithFailureReasonCounter(c metrics.Counter) RetryOption {
	return retryOptionFunc(func(o *retryOptions) error {
		if c == nil {
			return fmt.Errorf("endpoint: failure reason counter is nil")
		}
		o.failures = c
		return nil
	})
}

// WithEjectionReasonCounter counts instances taken out of rotation with a
// "reason" label: EjectConnectFailures (the ejections [WithEjectionCounter]
// counts), EjectClosing or EjectEvicted.
func WithEjectionReasonCounter(c metrics.Counter) Option {
	return optionFunc(func(o *options) error {
		if c == nil {
			return fmt.Errorf("endpoint: ejection reason counter is nil")
		}
		o.ejectionReasons = c
		return nil
	})
}

// endpoint returns the retrier's endpoint: call, wrapped to count failures
// when a failure counter is set.
func (r *retrier) endpoint() kitendpoint.Endpoint {
	if r.opts.failures == nil {
		return r.call
	}
	return func(ctx context.Context, request any) (any, error) {
		response, err := r.call(ctx, request)
		var re *RetryError
		if err != nil && errors.As(err, &re) {
			r.opts.failures.With("reason", failureReason(re.Reason)).Add(1)
		}
		return response, err
	}
}

func failureReason(reason error) string {
	switch {
	case errors.Is(reason, ErrAttemptsExhausted):
		return FailureAttemptsExhausted
	case errors.Is(reason, ErrBudgetExhausted):
		return FailureBudgetExhausted
	case errors.Is(reason, ErrNonIdempotent):
		return FailureNonIdempotent
	case errors.Is(reason, context.DeadlineExceeded):
		return FailureDeadline
	case errors.Is(reason, context.Canceled):
		return FailureCanceled
	default:
		return FailureNotRetryable
	}
}

// countRetry counts a retry after an attempt failed with err.
func (r *retrier) countRetry(err error, timedOut bool) {
	if r.opts.retries != nil {
		r.opts.retries.Add(1)
	}
	if r.opts.retryReasons == nil {
		return
	}
	reason := RetryRetryable
	switch class := r.opts.classify(err); {
	case class == NotSent:
		reason = RetryNotSent
	case class == Permanent && timedOut:
		reason = RetryAttemptTimeout
	case class == Permanent:
		reason = RetryPredicate
	}
	r.opts.retryReasons.With("reason", reason).Add(1)
}

// countEjection counts an instance taken out of rotation for reason.
func (e *Endpointer) countEjection(reason string) {
	if reason == EjectConnectFailures && e.opts.ejections != nil {
		e.opts.ejections.Add(1)
	}
	if e.opts.ejectionReasons != nil {
		e.opts.ejectionReasons.With("reason", reason).Add(1)
	}
}
