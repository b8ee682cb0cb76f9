package history

import (
	"strings"
	"testing"
	"time"
)

func TestBounded(t *testing.T) {
	const bound = 10 * time.Second
	call := func(took time.Duration) Call {
		c := Call{Op: "register", Path: "/s/lost/a", Sent: at(1000), Bound: bound, What: "lostreply createContainer"}
		if took >= 0 {
			c.Returned = c.Sent.Add(took)
		}
		return c
	}
	tests := []struct {
		name string
		give []Call
		bad  int
	}{
		{"a call that returned at once", []Call{call(5 * time.Millisecond)}, 0},
		{"a call that returned at its bound's end", []Call{call(bound + DefaultBounds.Skew/2)}, 0},
		{"a call that returned past its bound", []Call{call(bound + 2*DefaultBounds.Skew)}, 1},
		{"a call that never returned", []Call{call(-1)}, 1},
		{"one of two calls hung", []Call{call(time.Second), call(-1)}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &History{Start: at(0), End: at(60000), Calls: tt.give}
			r := Bounded(h, DefaultBounds)
			if r.Checks != len(tt.give) || len(r.Violations) != tt.bad {
				t.Fatalf("checks %d violations %v, want %d checks and %d violations", r.Checks, r.Violations, len(tt.give), tt.bad)
			}
			for _, v := range r.Violations {
				if v.Check != CheckBounded || !strings.Contains(v.What, "/s/lost/a") {
					t.Errorf("violation %+v does not name the check and the call", v)
				}
			}
		})
	}
	// Check runs it.
	h := &History{Start: at(0), End: at(60000), Calls: []Call{call(-1)}}
	if r := Check(h, DefaultBounds); r.ByCheck[CheckBounded] != 1 {
		t.Errorf("Check made %d bounded assertions, want 1", r.ByCheck[CheckBounded])
	}
}
