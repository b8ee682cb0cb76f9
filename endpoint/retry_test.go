package endpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitlb "github.com/go-kit/kit/sd/lb"
)

// fastBackoff keeps retry tests quick; no test depends on the waits' length.
var fastBackoff = Backoff(time.Microsecond, time.Microsecond)

func newTestRetry(t *testing.T, b kitlb.Balancer, opts ...RetryOption) kitendpoint.Endpoint {
	t.Helper()
	ep, err := NewRetry(b, append([]RetryOption{fastBackoff}, opts...)...)
	if err != nil {
		t.Fatalf("NewRetry: %v", err)
	}
	return ep
}

func TestNewRetryRejectsBadInput(t *testing.T) {
	e, _, _ := newTestEndpointer(t, []string{"a"})
	rr, _ := NewRoundRobin(e)
	tests := []struct {
		name string
		b    kitlb.Balancer
		give RetryOption
	}{
		{name: "a nil balancer is rejected"},
		{name: "zero attempts are rejected", b: rr, give: Attempts(0)},
		{name: "negative attempts are rejected", b: rr, give: Attempts(-1)},
		{name: "a zero attempt timeout is rejected", b: rr, give: AttemptTimeout(0)},
		{name: "a negative attempt timeout is rejected", b: rr, give: AttemptTimeout(-time.Second)},
		{name: "a zero backoff is rejected", b: rr, give: Backoff(0, time.Second)},
		{name: "a backoff max below its initial is rejected", b: rr, give: Backoff(time.Second, time.Millisecond)},
		{name: "a nil classifier is rejected", b: rr, give: RetryClassifier(nil)},
		{name: "a nil predicate is rejected", b: rr, give: RetryIf(nil)},
		{name: "a nil budget is rejected", b: rr, give: WithBudget(nil)},
		{name: "a nil retry counter is rejected", b: rr, give: WithRetryCounter(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []RetryOption
			if tt.give != nil {
				opts = append(opts, tt.give)
			}
			_, err := NewRetry(tt.b, opts...)
			if err == nil || !strings.HasPrefix(err.Error(), "endpoint: ") {
				t.Fatalf("got %v, want an error starting with \"endpoint: \"", err)
			}
		})
	}
}

func TestNewRetryBudgetRejectsBadInput(t *testing.T) {
	tests := []struct {
		name    string
		percent float64
		min     int
		ttl     time.Duration
	}{
		{"a percent above one is rejected", 1.5, 0, time.Second},
		{"a negative percent is rejected", -0.1, 0, time.Second},
		{"a negative floor is rejected", 0.1, -1, time.Second},
		{"a ttl under a second is rejected", 0.1, 1, time.Millisecond},
		{"a ttl over a minute is rejected", 0.1, 1, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewRetryBudget(tt.percent, tt.min, tt.ttl); err == nil || !strings.HasPrefix(err.Error(), "endpoint: ") {
				t.Fatalf("got %v, want an error starting with \"endpoint: \"", err)
			}
		})
	}
}

func TestRetriesGoToADifferentInstance(t *testing.T) {
	for _, name := range balancerNames {
		t.Run("with "+name+" every call reaches the one healthy instance", func(t *testing.T) {
			e, _, fl := newTestEndpointer(t, []string{"a", "b", "c"}, EjectAfter(0))
			fl.get(t, "a").fail(refused())
			fl.get(t, "b").fail(refused())
			budget, err := NewRetryBudget(1, 100, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			ep := newTestRetry(t, balancers(t, e)[name], Attempts(3), WithBudget(budget))
			for i := range 100 {
				ctx := WithStickyKey(context.Background(), fmt.Sprint("key-", i))
				got, err := ep(ctx, nil)
				if err != nil || got != "c" {
					t.Fatalf("call %d = %v, %v; want c", i, got, err)
				}
			}
		})
	}
}

func TestRetryFollowsTheFailureClass(t *testing.T) {
	tests := []struct {
		name          string
		give          error
		nonIdempotent bool
		wantAttempts  int
		wantReason    error
	}{
		{name: "a permanent failure is not retried", give: errBoom, wantAttempts: 1, wantReason: ErrNotRetryable},
		{name: "a refused connection is retried", give: refused(), wantAttempts: 3, wantReason: ErrAttemptsExhausted},
		{name: "a 503 is retried", give: &StatusError{Instance: "a", Code: 503}, wantAttempts: 3, wantReason: ErrAttemptsExhausted},
		{name: "a reset connection is retried", give: syscall.ECONNRESET, wantAttempts: 3, wantReason: ErrAttemptsExhausted},
		{name: "a non-idempotent request is retried when it was never sent", give: refused(), nonIdempotent: true, wantAttempts: 3, wantReason: ErrAttemptsExhausted},
		{name: "a non-idempotent request is not retried after a 503", give: &StatusError{Instance: "a", Code: 503}, nonIdempotent: true, wantAttempts: 1, wantReason: ErrNonIdempotent},
		{name: "a non-idempotent request is not retried after a reset", give: syscall.ECONNRESET, nonIdempotent: true, wantAttempts: 1, wantReason: ErrNonIdempotent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _, fl := newTestEndpointer(t, []string{"a", "b", "c"}, EjectAfter(0))
			for _, n := range []string{"a", "b", "c"} {
				fl.get(t, n).fail(tt.give)
			}
			rr, _ := NewRoundRobin(e)
			ep := newTestRetry(t, rr, Attempts(3))
			ctx := context.Background()
			if tt.nonIdempotent {
				ctx = NonIdempotent(ctx)
			}
			_, err := ep(ctx, nil)
			var re *RetryError
			if !errors.As(err, &re) {
				t.Fatalf("error %v is not a *RetryError", err)
			}
			if len(re.Attempts) != tt.wantAttempts || !errors.Is(err, tt.wantReason) {
				t.Fatalf("%d attempts, reason %v; want %d, %v", len(re.Attempts), re.Reason, tt.wantAttempts, tt.wantReason)
			}
			if !errors.Is(err, tt.give) {
				t.Fatalf("errors.Is(%v, %v) = false", err, tt.give)
			}
		})
	}
}

func TestRetryIfMakesAPermanentFailureRetryable(t *testing.T) {
	e, _, fl := newTestEndpointer(t, []string{"a", "b"})
	fl.get(t, "a").fail(errBoom)
	rr, _ := NewRoundRobin(e)
	ep := newTestRetry(t, rr, RetryIf(func(err error) bool { return errors.Is(err, errBoom) }))
	for range 4 {
		if got, err := ep(context.Background(), nil); err != nil || got != "b" {
			t.Fatalf("call = %v, %v; want b", got, err)
		}
	}
}

func TestTheRetryErrorReachesEveryAttemptsCause(t *testing.T) {
	var (
		errA = fmt.Errorf("a: %w", syscall.ECONNREFUSED)
		errB = fmt.Errorf("b: %w", ErrUnavailable)
		errC = fmt.Errorf("c: %w", syscall.ECONNRESET)
	)
	e, _, fl := newTestEndpointer(t, []string{"a", "b", "c"}, EjectAfter(0))
	fl.get(t, "a").fail(errA)
	fl.get(t, "b").fail(errB)
	fl.get(t, "c").fail(errC)
	rr, _ := NewRoundRobin(e)
	_, err := newTestRetry(t, rr, Attempts(3))(context.Background(), nil)

	for _, want := range []error{errA, errB, errC, syscall.ECONNREFUSED, ErrUnavailable, syscall.ECONNRESET, ErrAttemptsExhausted} {
		if !errors.Is(err, want) {
			t.Errorf("errors.Is(err, %v) = false", want)
		}
	}
	var re *RetryError
	if !errors.As(err, &re) {
		t.Fatal("errors.As(*RetryError) = false")
	}
	var ae *AttemptError
	if !errors.As(err, &ae) || ae.Attempt != 1 || ae.Instance == "" {
		t.Fatalf("errors.As(*AttemptError) = %+v", ae)
	}
	if !errors.Is(re.Last(), errC) && !errors.Is(re.Last(), errA) && !errors.Is(re.Last(), errB) {
		t.Errorf("Last() = %v", re.Last())
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "endpoint: ") || !strings.Contains(msg, "previously") {
		t.Errorf("message %q lacks the prefix or the earlier attempts", msg)
	}
}

func TestAnExhaustedBudgetStopsRetries(t *testing.T) {
	e, _, fl := newTestEndpointer(t, []string{"a", "b"}, EjectAfter(0))
	rr, _ := NewRoundRobin(e)

	t.Run("an empty budget allows no retry", func(t *testing.T) {
		empty, err := NewRetryBudget(0, 0, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		fl.get(t, "a").fail(refused())
		fl.get(t, "b").fail(refused())
		_, err = newTestRetry(t, rr, WithBudget(empty))(context.Background(), nil)
		if !errors.Is(err, ErrBudgetExhausted) {
			t.Fatalf("got %v, want ErrBudgetExhausted", err)
		}
	})
	t.Run("a budget of half the requests allows that many retries", func(t *testing.T) {
		budget, err := NewRetryBudget(0.5, 0, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		ep := newTestRetry(t, rr, WithBudget(budget), Attempts(2))
		fl.get(t, "a").fail(nil)
		fl.get(t, "b").fail(nil)
		for range 10 {
			if _, err := ep(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
		}
		fl.get(t, "a").fail(refused())
		fl.get(t, "b").fail(refused())
		// 10 deposits of 0.5 plus these calls' own: retries run out after
		// a handful and every later call stops on the budget.
		exhausted := 0
		for range 20 {
			_, err := ep(context.Background(), nil)
			if errors.Is(err, ErrBudgetExhausted) {
				exhausted++
			}
		}
		if exhausted == 0 || exhausted == 20 {
			t.Fatalf("%d of 20 calls stopped on the budget, want some but not all", exhausted)
		}
		if budget.Balance() != 0 {
			t.Errorf("balance = %d, want 0", budget.Balance())
		}
	})
}

func TestAnAttemptTimeoutMovesOnToAnotherInstance(t *testing.T) {
	e, _, fl := newTestEndpointer(t, []string{"a", "b"})
	_, release := fl.get(t, "a").holdCalls() // a never answers in time
	defer release()
	rr, _ := NewRoundRobin(e)
	ep := newTestRetry(t, rr, AttemptTimeout(5*time.Millisecond))
	for range 4 {
		if got, err := ep(context.Background(), nil); err != nil || got != "b" {
			t.Fatalf("call = %v, %v; want b", got, err)
		}
	}
	if fl.get(t, "a").calls.Load() == 0 {
		t.Fatal("no call reached a; the timeout was not exercised")
	}
}

func TestTheCallersContextEndsTheRetries(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int64
	b := kitlb.Balancer(balancerFunc(func() (kitendpoint.Endpoint, error) {
		return func(context.Context, any) (any, error) {
			calls.Add(1)
			cancel() // the caller gives up during the backoff
			return nil, refused()
		}, nil
	}))
	ep, err := NewRetry(b, Backoff(time.Hour, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, err = ep(ctx, nil)
	if !errors.Is(err, context.Canceled) || calls.Load() != 1 {
		t.Fatalf("got %v after %d calls, want context.Canceled after 1", err, calls.Load())
	}
}

type balancerFunc func() (kitendpoint.Endpoint, error)

func (f balancerFunc) Endpoint() (kitendpoint.Endpoint, error) { return f() }

func TestRetryWorksOverGoKitsBalancers(t *testing.T) {
	e, _, fl := newTestEndpointer(t, []string{"a", "b"}, EjectAfter(0))
	fl.get(t, "a").fail(refused())
	ep := newTestRetry(t, kitlb.NewRoundRobin(e))
	for range 4 {
		if got, err := ep(context.Background(), nil); err != nil || got != "b" {
			t.Fatalf("call = %v, %v; want b", got, err)
		}
	}
}

func TestASuccessfulCallAllocatesAtMostTwice(t *testing.T) {
	e, _, _ := newTestEndpointer(t, names(10))
	rr, _ := NewRoundRobin(e)
	ep := newTestRetry(t, rr)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := ep(ctx, nil); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Fatalf("a successful call allocated %v times, want at most 2", allocs)
	}
}

func BenchmarkRetryCall(b *testing.B) {
	e, err := NewEndpointer(newChanInstancer(names(10)...), benchFactory)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	rr, _ := NewRoundRobin(e)
	ep, _ := NewRetry(rr, Attempts(3))
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := ep(ctx, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
