package history

import (
	"strings"
	"testing"
)

// guarded is three instances a, b, c of svc, UP from 0, and a min-up
// step of -min-up 2 from 1000 to 9000.
func guarded(extra ...Change) *History {
	h := &History{Seed: 7, Start: at(-1000), End: at(20000),
		Truth: []Change{
			change(0, Created, pathA, 10, "a:1", true),
			change(0, Created, pathB, 11, "b:1", true),
			change(0, Created, pathC, 12, "c:1", true),
		},
		Guards: []Guard{{Service: svc, MinUp: 2, IDs: []string{"a", "b", "c"}, From: at(1000), To: at(9000)}},
	}
	h.Truth = append(h.Truth, extra...)
	return h
}

// drainedChange is a change of path to drained (or back) at ms.
func drainedChange(ms int, path string, czxid int64, addr string, on bool) Change {
	c := change(ms, Changed, path, czxid, addr, !on)
	c.Drained = on
	return c
}

func TestMinUp(t *testing.T) {
	for _, c := range []struct {
		name string
		h    *History
		bad  bool
	}{
		{"one drain", guarded(drainedChange(2000, pathA, 10, "a:1", true), drainedChange(5000, pathA, 10, "a:1", false)), false},
		{"two drains at once", guarded(drainedChange(2000, pathA, 10, "a:1", true), drainedChange(2100, pathB, 11, "b:1", true)), true},
		{"one after the other's undrain", guarded(drainedChange(2000, pathA, 10, "a:1", true), drainedChange(3000, pathA, 10, "a:1", false),
			drainedChange(3000, pathB, 11, "b:1", true)), false},
		{"a drain beside a sick and a stopped instance", guarded(drainedChange(2000, pathA, 10, "a:1", true),
			change(2500, Changed, pathB, 11, "b:1", false), change(2600, Deleted, pathC, 12, "c:1", false)), false},
		{"two drains outside the step", guarded(drainedChange(9500, pathA, 10, "a:1", true), drainedChange(9600, pathB, 11, "b:1", true)), false},
		{"a drain held from before the step", guarded(drainedChange(500, pathA, 10, "a:1", true), drainedChange(2000, pathB, 11, "b:1", true)), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := MinUp(c.h, NewTruth(c.h))
			if got := len(r.Violations) > 0; got != c.bad {
				t.Fatalf("violations=%v, want bad=%v", r.Violations, c.bad)
			}
			if r.Checks != 1 {
				t.Errorf("%d checks, want 1", r.Checks)
			}
			for _, v := range r.Violations {
				if v.Check != CheckMinUp || !strings.Contains(v.What, "a,b") {
					t.Errorf("violation %+v: want %s naming a,b", v, CheckMinUp)
				}
			}
		})
	}
}

// Check runs MinUp: a history whose drains broke the guard fails.
func TestCheckRunsMinUp(t *testing.T) {
	h := guarded(drainedChange(2000, pathA, 10, "a:1", true), drainedChange(2100, pathB, 11, "b:1", true))
	r := Check(h, DefaultBounds)
	if r.ByCheck[CheckMinUp] != 1 || !hasCheck(r.Violations, CheckMinUp) {
		t.Fatalf("Check: min-up checks %d, violations %v", r.ByCheck[CheckMinUp], r.Violations)
	}
}

func hasCheck(vs []Violation, check string) bool {
	for _, v := range vs {
		if v.Check == check {
			return true
		}
	}
	return false
}
