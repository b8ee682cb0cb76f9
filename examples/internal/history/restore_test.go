package history

import (
	"strings"
	"testing"
	"time"
)

// restoredEmpty is a and b of svc, registered at 0, and c, stopped at
// 5000; the ensemble restored empty from 10000 to 15000 (zxids start
// again low); a and b registered again at 18000 and 20000; the instancer
// publishes both at 21000.
func restoredEmpty() *History {
	return &History{Seed: 7, Start: at(-1000), End: at(45000), SessionTimeout: 4 * time.Second,
		Restore: &Restore{Kind: "empty", From: at(10000), To: at(15000)},
		Truth: []Change{
			change(0, Created, pathA, 100, "a:1", true),
			change(0, Created, pathB, 101, "b:1", true),
			change(0, Created, pathC, 102, "c:1", true),
			change(5000, Deleted, pathC, 102, "c:1", false),
			change(15500, Deleted, pathA, 100, "a:1", false),
			change(15500, Deleted, pathB, 101, "b:1", false),
			change(18000, Created, pathA, 3, "a:1", true),
			change(20000, Created, pathB, 4, "b:1", true),
		},
		Runs: []Run{
			{Service: svc, ID: "a", Path: pathA, Start: at(-1000)},
			{Service: svc, ID: "b", Path: pathB, Start: at(-1000)},
			{Service: svc, ID: "c", Path: pathC, Start: at(-1000), Stopping: at(4900), How: "sigterm"},
		},
		Publishes: []Publish{
			pub(100, "instancer", m("a:1", 100), m("b:1", 101), m("c:1", 102)),
			pub(5100, "instancer", m("a:1", 100), m("b:1", 101)),
			{At: at(11000), Consumer: "instancer", Service: svc, Members: []Member{m("a:1", 100), m("b:1", 101)}, Err: "sd: disconnected"},
			pub(16000, "instancer"),
			pub(18100, "instancer", m("a:1", 3)),
			pub(21000, "instancer", m("a:1", 3), m("b:1", 4)),
		},
	}
}

func TestRestored(t *testing.T) {
	tests := []struct {
		name   string
		give   func(h *History)
		want   []string // what the violations name, in order
		checks int
	}{
		{name: "every provider back, the consumer converged", give: func(*History) {}, checks: 3},
		{
			name: "a provider never registered again",
			give: func(h *History) {
				h.Truth = h.Truth[:7]
				h.Publishes[len(h.Publishes)-1] = pub(21000, "instancer", m("a:1", 3))
			},
			want: []string{"b, live through the empty restore"}, checks: 3,
		},
		{
			name: "a provider registered again, then gone",
			give: func(h *History) {
				h.Truth = append(h.Truth, change(35000, Deleted, pathB, 4, "b:1", false))
			},
			want: []string{"b, live", "publishes [a:1 b:1]"}, checks: 3,
		},
		{
			name: "a consumer refused for ever keeps the old set with an error",
			give: func(h *History) {
				h.Publishes = h.Publishes[:3]
			},
			want: []string{"publishes [a:1 b:1] (since"}, checks: 3,
		},
		{
			name: "a consumer that shows a stale set without error",
			give: func(h *History) {
				h.Publishes = h.Publishes[:5]
			},
			want: []string{"publishes [a:1]"}, checks: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := restoredEmpty()
			tt.give(h)
			r := Restored(h, DefaultBounds)
			if r.Checks != tt.checks {
				t.Errorf("%d checks, want %d", r.Checks, tt.checks)
			}
			if len(r.Violations) != len(tt.want) {
				t.Fatalf("violations %v, want %d naming %q", r.Violations, len(tt.want), tt.want)
			}
			for i, v := range r.Violations {
				if v.Check != CheckRestored || !strings.Contains(v.What, tt.want[i]) {
					t.Errorf("violation %+v: want %s naming %q", v, CheckRestored, tt.want[i])
				}
			}
		})
	}
}

func TestRestoredUnverifiedWhenTheRunEndsTooSoon(t *testing.T) {
	h := restoredEmpty()
	h.End = at(30000)
	if r := Restored(h, DefaultBounds); r.Checks != 0 || r.Unverified != 1 || len(r.Violations) != 0 {
		t.Fatalf("%+v, want one unverified", r)
	}
}

// Check holds the order validators to the history before a restore: the
// zxids that start again low after it are no going back or resurrection.
func TestCheckCutsTheOrderAtARestore(t *testing.T) {
	h := restoredEmpty()
	r := Check(h, DefaultBounds)
	if len(r.Violations) != 0 {
		t.Errorf("Check: %v", r.Violations)
	}
	if r.ByCheck[CheckRestored] != 3 {
		t.Errorf("restored checks %d, want 3", r.ByCheck[CheckRestored])
	}
	h.Restore = nil // the same history read whole: the order validators trip
	if r := Check(h, DefaultBounds); len(r.Violations) == 0 {
		t.Errorf("Check without the restore found nothing: the cut is not what keeps it clean")
	}
}

// A call that found no endpoint while the providers registered again
// after a restore is counted apart; one after the bound is a failure.
func TestRequestsCountFailuresOfARestoreApart(t *testing.T) {
	h := restoredEmpty()
	h.Requests = []Request{
		{At: at(16000), Gateway: "gw", Failed: true, Reason: "no endpoints"},
		{At: at(17000), Gateway: "gw", Instance: "a"},
		{At: at(27000), Gateway: "gw", Failed: true, Reason: "no endpoints"},
		{At: at(40000), Gateway: "gw", Failed: true, Reason: "no endpoints"},
	}
	r := Requests(h)
	if r.Failed != 1 || r.RestoreFailed != 2 || len(r.Violations) != 1 {
		t.Fatalf("failed %d, restore_failed %d, violations %v; want 1, 2, one", r.Failed, r.RestoreFailed, r.Violations)
	}
}
