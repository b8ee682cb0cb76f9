package endpoint

import (
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	kitendpoint "github.com/go-kit/kit/endpoint"
	"github.com/go-kit/kit/metrics"
	kitsd "github.com/go-kit/kit/sd"
	kitlb "github.com/go-kit/kit/sd/lb"
)

// recCounter records additions by label values, shared by its With copies.
type recCounter struct {
	mu  *sync.Mutex
	m   map[string]float64
	lvs []string
}

func newRecCounter() recCounter { return recCounter{mu: &sync.Mutex{}, m: map[string]float64{}} }

func (c recCounter) With(lvs ...string) metrics.Counter {
	return recCounter{c.mu, c.m, append(slices.Clone(c.lvs), lvs...)}
}

func (c recCounter) Add(d float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[strings.Join(c.lvs, ",")] += d
}

func (c recCounter) get(lvs ...string) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[strings.Join(lvs, ",")]
}

func TestRetryAndFailureReasonsAreCounted(t *testing.T) {
	retries, failures, plain := newRecCounter(), newRecCounter(), newRecCounter()
	var mu sync.Mutex
	errs := []error{syscall.ECONNREFUSED, nil, io.EOF}
	ep := func(context.Context, any) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		err := errs[0]
		errs = errs[1:]
		return "ok", err
	}
	b := kitlb.NewRoundRobin(kitsd.FixedEndpointer{kitendpoint.Endpoint(ep)})
	call, err := NewRetry(b, WithRetryReasonCounter(retries), WithFailureReasonCounter(failures), WithRetryCounter(plain),
		Backoff(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := call(context.Background(), nil); err != nil {
		t.Fatalf("first call: %v", err)
	}
	if _, err := call(NonIdempotent(context.Background()), nil); err == nil {
		t.Fatal("a non-idempotent call that got EOF succeeded")
	}
	if got := retries.get("reason", RetryNotSent); got != 1 {
		t.Errorf("retries by not-sent = %v, want 1 (%v)", got, retries.m)
	}
	if got := plain.get(); got != 1 {
		t.Errorf("plain retries = %v, want 1", got)
	}
	if got := failures.get("reason", FailureNonIdempotent); got != 1 {
		t.Errorf("failures by non-idempotent = %v, want 1 (%v)", got, failures.m)
	}
}

func TestFailureReasonNamesEveryReason(t *testing.T) {
	for give, want := range map[error]string{
		ErrAttemptsExhausted:     FailureAttemptsExhausted,
		ErrBudgetExhausted:       FailureBudgetExhausted,
		ErrNotRetryable:          FailureNotRetryable,
		ErrNonIdempotent:         FailureNonIdempotent,
		context.Canceled:         FailureCanceled,
		context.DeadlineExceeded: FailureDeadline,
	} {
		if got := failureReason(give); got != want {
			t.Errorf("failureReason(%v) = %q, want %q", give, got, want)
		}
	}
}

func TestEvictionsAreCountedAsEjections(t *testing.T) {
	ejections := newRecCounter()
	f := func(string) (kitendpoint.Endpoint, io.Closer, error) {
		return func(context.Context, any) (any, error) { return nil, nil }, nil, nil
	}
	e, err := NewEndpointer(kitsd.FixedInstancer{"a:1", "b:1"}, f, WithEjectionReasonCounter(ejections))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.Evict("a:1")
	e.Evict("c:1") // not listed: nothing
	if got := ejections.get("reason", EjectEvicted); got != 1 {
		t.Errorf("ejections by evicted = %v, want 1 (%v)", got, ejections.m)
	}
}
