package endpoint

import (
	"context"
	"errors"
	"github.com/gracekit/gracekit/internal/testutil"
	"slices"
	"strings"
	"testing"
	"time"

	kitlb "github.com/go-kit/kit/sd/lb"
)

func TestNewEndpointerRejectsBadInput(t *testing.T) {
	tests := []struct {
		name string
		give []Option
		src  bool
		f    bool
	}{
		{name: "a nil instancer is rejected", f: true},
		{name: "a nil factory is rejected", src: true},
		{name: "a negative invalidate timeout is rejected", src: true, f: true, give: []Option{InvalidateOnError(-time.Second)}},
		{name: "a nil logger is rejected", src: true, f: true, give: []Option{WithLogger(nil)}},
		{name: "a nil classifier is rejected", src: true, f: true, give: []Option{WithClassifier(nil)}},
		{name: "a negative failure count is rejected", src: true, f: true, give: []Option{EjectAfter(-1)}},
		{name: "a zero cool-off is rejected", src: true, f: true, give: []Option{EjectCoolOff(0, time.Second)}},
		{name: "a max cool-off below the cool-off is rejected", src: true, f: true, give: []Option{EjectCoolOff(2*time.Second, time.Second)}},
		{name: "an ejected share above one is rejected", src: true, f: true, give: []Option{MaxEjectedShare(1.5)}},
		{name: "a zero closing hold is rejected", src: true, f: true, give: []Option{ClosingHold(0)}},
		{name: "a nil ejection counter is rejected", src: true, f: true, give: []Option{WithEjectionCounter(nil)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				src *chanInstancer
				fl  = newFleet()
			)
			if tt.src {
				src = newChanInstancer("a")
			}
			var err error
			switch {
			case tt.src && tt.f:
				_, err = NewEndpointer(src, fl.factory, tt.give...)
			case tt.src:
				_, err = NewEndpointer(src, nil, tt.give...)
			default:
				_, err = NewEndpointer(nil, fl.factory, tt.give...)
			}
			if err == nil || !strings.HasPrefix(err.Error(), "endpoint: ") {
				t.Fatalf("got error %v, want one starting with \"endpoint: \"", err)
			}
		})
	}
}

func TestEndpointerFollowsTheInstancer(t *testing.T) {
	e, src, fl := newTestEndpointer(t, []string{"b", "a", "a"})
	if got, want := e.Instances(), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("instances = %v, want %v", got, want)
	}
	eps, err := e.Endpoints()
	if err != nil || len(eps) != 2 {
		t.Fatalf("Endpoints() = %d endpoints, %v; want 2, nil", len(eps), err)
	}

	src.Set("b", "c")
	settle(e)
	if got, want := e.Instances(), []string{"b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("instances = %v, want %v", got, want)
	}
	if fl.get(t, "a").closed.Load() != 1 {
		t.Error("removed instance a was not closed once")
	}
	if fl.built("b") != 1 {
		t.Errorf("instance b was built %d times, want 1 (kept across updates)", fl.built("b"))
	}
}

func TestEndpointerKeepsEndpointsOnDiscoveryErrors(t *testing.T) {
	e, src, _ := newTestEndpointer(t, []string{"a", "b"})
	src.Fail(errBoom)
	settle(e)
	eps, err := e.Endpoints()
	if err != nil || len(eps) != 2 {
		t.Fatalf("Endpoints() = %d endpoints, %v; want the last 2, nil", len(eps), err)
	}
}

func TestEndpointerInvalidatesAfterTheTimeoutWhenAsked(t *testing.T) {
	e, src, fl := newTestEndpointer(t, []string{"a"}, InvalidateOnError(time.Millisecond))
	src.Fail(errBoom)
	testutil.WaitFor(t, "the endpoints to be invalidated", func() bool {
		_, err := e.Endpoints()
		return err != nil
	})
	if fl.get(t, "a").closed.Load() != 1 {
		t.Error("instance a was not closed on invalidation")
	}
	rr, _ := NewRoundRobin(e)
	if _, err := rr.Endpoint(); err == nil {
		t.Error("balancer picked from an invalidated set")
	}

	src.Set("a")
	settle(e)
	if _, err := call(rr); err != nil {
		t.Fatalf("call after recovery: %v", err)
	}
}

func TestEvictRemovesAnInstanceUntilDiscoveryDropsIt(t *testing.T) {
	e, src, fl := newTestEndpointer(t, []string{"a", "b"})
	rr, _ := NewRoundRobin(e)

	e.Evict("b")
	for range 20 {
		if got, err := call(rr); err != nil || got != "a" {
			t.Fatalf("call = %q, %v; want a", got, err)
		}
	}
	if fl.get(t, "b").closed.Load() != 1 {
		t.Error("evicted instance b was not closed")
	}

	src.Set("a", "b")
	settle(e)
	if got := e.Instances(); slices.Contains(got, "b") {
		t.Fatalf("instances = %v, evicted b came back while discovery still lists it", got)
	}

	src.Set("a")
	settle(e)
	src.Set("a", "b")
	settle(e)
	if got := e.Instances(); !slices.Contains(got, "b") {
		t.Fatalf("instances = %v, b did not come back after discovery dropped and re-listed it", got)
	}
	if fl.built("b") != 2 {
		t.Errorf("b built %d times, want 2", fl.built("b"))
	}
}

func TestARemovedInstanceIsClosedOnlyAfterItsCallsFinish(t *testing.T) {
	e, src, fl := newTestEndpointer(t, []string{"a"})
	a := fl.get(t, "a")
	entered, release := a.holdCalls()
	defer release()
	rr, _ := NewRoundRobin(e)

	type result struct {
		got string
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := call(rr)
		done <- result{got, err}
	}()
	<-entered

	src.Set()
	settle(e)
	if a.closed.Load() != 0 {
		t.Fatal("instance a was closed while a call was in flight on it")
	}
	release()
	r := <-done
	if r.err != nil || r.got != "a" {
		t.Fatalf("in-flight call = %q, %v; want a, nil", r.got, r.err)
	}
	if a.closed.Load() != 1 {
		t.Fatalf("instance a closed %d times after its last call, want 1", a.closed.Load())
	}
}

func TestACallOnAClosedInstanceIsNotSent(t *testing.T) {
	e, src, _ := newTestEndpointer(t, []string{"a"})
	rr, _ := NewRoundRobin(e)
	ep, err := rr.Endpoint()
	if err != nil {
		t.Fatal(err)
	}
	src.Set()
	settle(e)
	_, err = ep(context.Background(), nil)
	if !errors.Is(err, ErrRemoved) || Classify(err) != NotSent {
		t.Fatalf("call on a closed instance = %v (%v), want ErrRemoved (not sent)", err, Classify(err))
	}
}

func TestCloseDeregistersClosesInstancesAndIsIdempotent(t *testing.T) {
	src := newChanInstancer("a", "b")
	fl := newFleet()
	e, err := NewEndpointer(src, fl.factory)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if src.registered() != 0 {
		t.Error("Close did not deregister")
	}
	for _, name := range []string{"a", "b"} {
		if got := fl.get(t, name).closed.Load(); got != 1 {
			t.Errorf("instance %s closed %d times, want 1", name, got)
		}
	}
	if _, err := e.Endpoints(); !errors.Is(err, ErrClosed) {
		t.Errorf("Endpoints() after Close: %v, want ErrClosed", err)
	}
	rr, _ := NewRoundRobin(e)
	if _, err := rr.Endpoint(); !errors.Is(err, ErrClosed) {
		t.Errorf("pick after Close: %v, want ErrClosed", err)
	}
	e.Evict("a") // no panic, no effect
}

func TestAnEmptySetReturnsGoKitsNoEndpoints(t *testing.T) {
	e, _, _ := newTestEndpointer(t, nil)
	rr, _ := NewRoundRobin(e)
	if _, err := rr.Endpoint(); !errors.Is(err, kitlb.ErrNoEndpoints) {
		t.Fatalf("pick from an empty set: %v, want lb.ErrNoEndpoints", err)
	}
}

// The stop sequence sets OUT_OF_SERVICE (discovery drops the instance)
// before it flushes (Evict): no later update would lift a tombstone, so the
// instance must come back when it restarts on the same address.
func TestEvictOfAnUnlistedInstanceLeavesNoTombstone(t *testing.T) {
	e, src, _ := newTestEndpointer(t, []string{"a", "b"})
	src.Set("b")
	settle(e)
	e.Evict("a")
	src.Set("a", "b")
	settle(e)
	if got := e.Instances(); !slices.Contains(got, "a") {
		t.Fatalf("instances = %v; a restarted on the same address is kept out", got)
	}
}
