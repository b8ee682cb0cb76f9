package endpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	kitendpoint "github.com/go-kit/kit/endpoint"
	"github.com/go-kit/kit/metrics"
	kitlb "github.com/go-kit/kit/sd/lb"
)

// Defaults of the [NewRetry] options.
const (
	// DefaultAttempts is the number of attempts per call, the first included.
	DefaultAttempts = 3
	// DefaultBackoffInitial is the mean wait before the first retry.
	DefaultBackoffInitial = 10 * time.Millisecond
	// DefaultBackoffMax caps the mean wait between retries.
	DefaultBackoffMax = time.Second
)

// Reasons a retrying call stopped, in [RetryError.Reason].
var (
	// ErrAttemptsExhausted: every attempt failed.
	ErrAttemptsExhausted = errors.New("endpoint: attempts exhausted")
	// ErrBudgetExhausted: the retry budget had no retry left.
	ErrBudgetExhausted = errors.New("endpoint: retry budget exhausted")
	// ErrNotRetryable: the last failure was [Permanent].
	ErrNotRetryable = errors.New("endpoint: failure not retryable")
	// ErrNonIdempotent: the request is marked [NonIdempotent] and the last
	// attempt may have reached the instance.
	ErrNonIdempotent = errors.New("endpoint: non-idempotent request may have been sent")
)

// RetryOption configures [NewRetry].
type RetryOption interface {
	applyRetry(*retryOptions) error
}

type retryOptionFunc func(*retryOptions) error

func (f retryOptionFunc) applyRetry(o *retryOptions) error { return f(o) }

type retryOptions struct {
	attempts       int
	attemptTimeout time.Duration
	backoffInitial time.Duration
	backoffMax     time.Duration
	classify       Classifier
	retryIf        func(error) bool
	budget         *RetryBudget
	retries        metrics.Counter
	retryReasons   metrics.Counter // see metrics.go
	failures       metrics.Counter
}

// Attempts sets the number of attempts per call, the first included (default
// [DefaultAttempts]). n must be between 1 and 100.
func Attempts(n int) RetryOption {
	return retryOptionFunc(func(o *retryOptions) error {
		if n < 1 || n > 100 {
			return fmt.Errorf("endpoint: attempts %d out of range (1 to 100)", n)
		}
		o.attempts = n
		return nil
	})
}

// AttemptTimeout bounds each attempt (default: none, only the caller's
// context). An attempt that times out while the caller's context is still
// live counts as [Retryable]. d must be positive.
func AttemptTimeout(d time.Duration) RetryOption {
	return retryOptionFunc(func(o *retryOptions) error {
		if d <= 0 {
			return fmt.Errorf("endpoint: attempt timeout %v is not positive (minimum is 1ns)", d)
		}
		o.attemptTimeout = d
		return nil
	})
}

// Backoff sets the jittered exponential backoff between attempts: the mean
// wait starts at initial and doubles up to max, each wait drawn uniformly
// within ±50% of the mean (cenkalti/backoff's ExponentialBackOff). Defaults
// [DefaultBackoffInitial], [DefaultBackoffMax]. Both must be positive and
// initial must not exceed max.
func Backoff(initial, max time.Duration) RetryOption {
	return retryOptionFunc(func(o *retryOptions) error {
		if initial <= 0 {
			return fmt.Errorf("endpoint: backoff initial %v is not positive (minimum is 1ns)", initial)
		}
		if max < initial {
			return fmt.Errorf("endpoint: backoff max %v is below the initial %v", max, initial)
		}
		o.backoffInitial, o.backoffMax = initial, max
		return nil
	})
}

// RetryClassifier sets how failures are classified (default [Classify]).
func RetryClassifier(c Classifier) RetryOption {
	return retryOptionFunc(func(o *retryOptions) error {
		if c == nil {
			return fmt.Errorf("endpoint: retry classifier is nil")
		}
		o.classify = c
		return nil
	})
}

// RetryIf adds a user predicate: a failure the classifier calls [Permanent]
// is treated as [Retryable] when f returns true. f must not block.
func RetryIf(f func(err error) bool) RetryOption {
	return retryOptionFunc(func(o *retryOptions) error {
		if f == nil {
			return fmt.Errorf("endpoint: retry predicate is nil")
		}
		o.retryIf = f
		return nil
	})
}

// WithBudget sets the retry budget, which may be shared between endpoints.
// The default is a budget of its own with [DefaultBudgetPercent],
// [DefaultBudgetMinPerSecond] and [DefaultBudgetTTL].
func WithBudget(b *RetryBudget) RetryOption {
	return retryOptionFunc(func(o *retryOptions) error {
		if b == nil {
			return fmt.Errorf("endpoint: retry budget is nil")
		}
		o.budget = b
		return nil
	})
}

// WithRetryCounter counts retries (attempts after the first).
func WithRetryCounter(c metrics.Counter) RetryOption {
	return retryOptionFunc(func(o *retryOptions) error {
		if c == nil {
			return fmt.Errorf("endpoint: retry counter is nil")
		}
		o.retries = c
		return nil
	})
}

// AttemptError is the failure of one attempt.
type AttemptError struct {
	Attempt  int    // 1 for the first attempt
	Instance string // the instance called, "" if unknown or none was picked
	Err      error
}

func (e *AttemptError) Error() string {
	if e.Instance == "" {
		return fmt.Sprintf("attempt %d: %v", e.Attempt, e.Err)
	}
	return fmt.Sprintf("attempt %d on %s: %v", e.Attempt, e.Instance, e.Err)
}

func (e *AttemptError) Unwrap() error { return e.Err }

// RetryError is returned by the endpoint of [NewRetry] when a call failed.
// errors.Is and errors.As see the Reason and every attempt's error (and so
// their causes).
type RetryError struct {
	Attempts []*AttemptError // in order; the last one is the final failure
	// Reason says why retrying stopped: ErrAttemptsExhausted,
	// ErrBudgetExhausted, ErrNotRetryable, ErrNonIdempotent, or the
	// caller's context error.
	Reason error
}

func (e *RetryError) Error() string {
	var b strings.Builder
	b.WriteString("endpoint: call failed (")
	b.WriteString(strings.TrimPrefix(e.Reason.Error(), "endpoint: "))
	b.WriteString(")")
	for i := len(e.Attempts) - 1; i >= 0; i-- {
		b.WriteString(": ")
		if i < len(e.Attempts)-1 {
			b.WriteString("previously ")
		}
		b.WriteString(e.Attempts[i].Error())
	}
	return b.String()
}

// Unwrap returns the reason followed by every attempt's error.
func (e *RetryError) Unwrap() []error {
	out := make([]error, 0, len(e.Attempts)+1)
	out = append(out, e.Reason)
	for _, a := range e.Attempts {
		out = append(out, a)
	}
	return out
}

// Last returns the final attempt's error, or nil.
func (e *RetryError) Last() error {
	if len(e.Attempts) == 0 {
		return nil
	}
	return e.Attempts[len(e.Attempts)-1].Err
}

type retrier struct {
	b    kitlb.Balancer
	p    picker // b when it is one of this package's balancers
	opts retryOptions
}

// NewRetry returns an endpoint that calls an endpoint picked by b and retries
// failures that the classifier allows (see [Classify]):
//   - [NotSent] failures are retried for every request, [Retryable] ones only
//     for requests not marked [NonIdempotent], [Permanent] ones never;
//   - each retry goes to an instance not tried yet in this call when one
//     exists (with this package's balancers; with another lb.Balancer, to
//     whatever it picks);
//   - retries wait a jittered exponential backoff, stop at the caller's
//     context deadline, and draw on a [RetryBudget].
//
// A failed call returns a [*RetryError]. A call whose first attempt succeeds
// allocates nothing of its own unless [AttemptTimeout] is set.
func NewRetry(b kitlb.Balancer, opts ...RetryOption) (kitendpoint.Endpoint, error) {
	if b == nil {
		return nil, fmt.Errorf("endpoint: balancer is nil")
	}
	o := retryOptions{
		attempts:       DefaultAttempts,
		backoffInitial: DefaultBackoffInitial,
		backoffMax:     DefaultBackoffMax,
		classify:       Classify,
	}
	for _, opt := range opts {
		if err := opt.applyRetry(&o); err != nil {
			return nil, err
		}
	}
	if o.budget == nil {
		o.budget = defaultBudget()
	}
	r := &retrier{b: b, opts: o}
	r.p, _ = b.(picker)
	return r.endpoint(), nil
}

func (r *retrier) call(ctx context.Context, request any) (any, error) {
	r.opts.budget.Deposit()
	var (
		tried    triedSet
		attempts []*AttemptError
		bo       backoff.ExponentialBackOff
	)
	for n := 1; ; n++ {
		var (
			in       *instance
			ep       kitendpoint.Endpoint
			err      error
			timedOut bool
		)
		if r.p != nil {
			if in, err = r.p.pick(ctx, tried); err == nil {
				ep = in.call
				tried.add(in)
			}
		} else {
			ep, err = r.b.Endpoint()
		}
		if err == nil {
			var response any
			if r.opts.attemptTimeout > 0 {
				actx, cancel := context.WithTimeout(ctx, r.opts.attemptTimeout)
				response, err = ep(actx, request)
				timedOut = err != nil && ctx.Err() == nil && actx.Err() != nil
				cancel()
			} else {
				response, err = ep(ctx, request)
			}
			if err == nil {
				return response, nil
			}
		}
		ae := &AttemptError{Attempt: n, Err: err}
		if in != nil {
			ae.Instance = in.name
		}
		attempts = append(attempts, ae)
		if reason := r.stop(ctx, n, err, timedOut); reason != nil {
			return nil, &RetryError{Attempts: attempts, Reason: reason}
		}
		if n == 1 {
			bo = backoff.ExponentialBackOff{
				InitialInterval:     r.opts.backoffInitial,
				RandomizationFactor: 0.5,
				Multiplier:          2,
				MaxInterval:         r.opts.backoffMax,
			}
			bo.Reset()
		}
		t := time.NewTimer(bo.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, &RetryError{Attempts: attempts, Reason: ctx.Err()}
		case <-t.C:
		}
		r.countRetry(err, timedOut)
	}
}

// stop returns why the call must not be retried after attempt n failed with
// err, or nil to retry.
func (r *retrier) stop(ctx context.Context, n int, err error, timedOut bool) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	class := r.opts.classify(err)
	if class == Permanent && (timedOut || (r.opts.retryIf != nil && r.opts.retryIf(err))) {
		class = Retryable
	}
	switch {
	case class == Permanent:
		return ErrNotRetryable
	case class == Retryable && IsNonIdempotent(ctx):
		return ErrNonIdempotent
	case n >= r.opts.attempts:
		return ErrAttemptsExhausted
	case !r.opts.budget.TryWithdraw():
		return ErrBudgetExhausted
	}
	return nil
}
