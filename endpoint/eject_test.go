package endpoint

import (
	"context"
	"testing"
	"time"
)

// failDirect makes n calls straight to instance i of e's sorted set.
func failDirect(t *testing.T, e *Endpointer, i, n int) {
	t.Helper()
	eps, _ := e.Endpoints()
	for range n {
		if _, err := eps[i](context.Background(), nil); err == nil {
			t.Fatal("call succeeded, want a failure")
		}
	}
}

func picks(t *testing.T, e *Endpointer, n int) map[string]int {
	t.Helper()
	rr, _ := NewRoundRobin(e)
	counts := map[string]int{}
	for range n {
		got, _ := call(rr)
		if got == "" {
			t.Fatal("pick failed")
		}
		counts[got]++
	}
	return counts
}

// ejected reports whether the named instance is out of rotation now.
func ejected(e *Endpointer, name string) bool {
	for _, in := range e.snap.Load().instances {
		if in.name == name {
			return !in.available()
		}
	}
	return false
}

func TestConsecutiveConnectFailuresEjectUntilTheCoolOffEnds(t *testing.T) {
	clk := newClock()
	ejections := &counter{}
	e, _, fl := newTestEndpointer(t, []string{"a", "b", "c"},
		withClock(clk.now), EjectAfter(3), EjectCoolOff(time.Second, time.Minute), WithEjectionCounter(ejections))
	a := fl.get(t, "a")
	a.fail(refused())

	failDirect(t, e, 0, 2)
	if ejected(e, "a") {
		t.Fatal("a was ejected after 2 failures, want 3")
	}
	failDirect(t, e, 0, 1)
	if !ejected(e, "a") {
		t.Fatal("a not ejected after 3 consecutive connect failures")
	}
	if got := picks(t, e, 30)["a"]; got != 0 {
		t.Fatalf("a picked %d times while ejected", got)
	}

	clk.advance(time.Second)
	if picks(t, e, 30)["a"] == 0 {
		t.Fatal("a not re-admitted after its cool-off")
	}

	t.Run("a failure streak right after re-admission ejects for twice as long", func(t *testing.T) {
		// The picks above called a, which still fails: it is out again.
		if !ejected(e, "a") {
			t.Fatal("a not ejected again")
		}
		clk.advance(time.Second)
		if !ejected(e, "a") {
			t.Fatal("a re-admitted after 1s; its second cool-off should be 2s")
		}
		clk.advance(time.Second)
		if ejected(e, "a") {
			t.Fatal("a not re-admitted after its second cool-off")
		}
	})
	t.Run("a success after re-admission resets the cool-off", func(t *testing.T) {
		a.fail(nil)
		if picks(t, e, 30)["a"] == 0 {
			t.Fatal("a not picked")
		}
		a.fail(refused())
		failDirect(t, e, 0, 3)
		clk.advance(time.Second)
		if ejected(e, "a") {
			t.Fatal("a still ejected after 1s; the success should have reset its cool-off")
		}
	})
	if got := ejections.Value(); got != 3 {
		t.Errorf("ejection counter = %v, want 3", got)
	}
}

func TestASuccessResetsTheFailureStreak(t *testing.T) {
	e, _, fl := newTestEndpointer(t, []string{"a", "b"}, withClock(newClock().now), EjectAfter(3))
	a := fl.get(t, "a")
	for range 3 {
		a.fail(refused())
		failDirect(t, e, 0, 2)
		a.fail(nil)
		if picks(t, e, 10)["a"] == 0 {
			t.Fatal("a was ejected without 3 consecutive failures")
		}
	}
}

func TestOtherFailuresDoNotEject(t *testing.T) {
	e, _, fl := newTestEndpointer(t, []string{"a", "b"}, withClock(newClock().now), EjectAfter(1))
	fl.get(t, "a").fail(errBoom)
	failDirect(t, e, 0, 10)
	if picks(t, e, 10)["a"] == 0 {
		t.Fatal("a was ejected for application errors")
	}
}

func TestEjectionNeverExceedsTheMaxShare(t *testing.T) {
	tests := []struct {
		name      string
		give      float64 // max share
		instances int
		want      int // ejected when all fail
	}{
		{name: "half of four is two", give: 0.5, instances: 4, want: 2},
		{name: "a share of zero ejects none", give: 0, instances: 4, want: 0},
		{name: "a share of one still leaves one", give: 1, instances: 3, want: 2},
		{name: "the only instance is never ejected", give: 1, instances: 1, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _, fl := newTestEndpointer(t, names(tt.instances),
				withClock(newClock().now), EjectAfter(1), MaxEjectedShare(tt.give))
			for i, n := range names(tt.instances) {
				fl.get(t, n).fail(refused())
				failDirect(t, e, i, 2)
			}
			out := 0
			for _, n := range names(tt.instances) {
				if ejected(e, n) {
					out++
				}
			}
			if out != tt.want {
				t.Fatalf("%d of %d instances ejected, want %d", out, tt.instances, tt.want)
			}
		})
	}
}
