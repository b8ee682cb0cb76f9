package history

import (
	"slices"
	"strings"
	"testing"
	"time"
)

var testRamp = SlowStart{Window: 10 * time.Second, Aggression: 1, MinWeight: 0.1, Gateways: []string{"gw"}}

// restarted is a, b and c of svc from -1000, c stopped at 9000 and
// started again at 10000, its node registered at 10400, through one
// gateway that ramps (testRamp).
func restarted() *History {
	c2 := change(10500, Created, pathC, 20, "c:2", true)
	c2.Registered = at(10400)
	s := testRamp
	return &History{Seed: 7, Start: at(-1000), End: at(30000), SlowStart: &s,
		Truth: []Change{
			change(-900, Created, pathA, 10, "a:1", true),
			change(-900, Created, pathB, 11, "b:1", true),
			change(-900, Created, pathC, 12, "c:1", true),
			change(9100, Deleted, pathC, 12, "c:1", false),
			c2,
		},
		Runs: []Run{
			{Service: svc, ID: "a", Path: pathA, Start: at(-1000)},
			{Service: svc, ID: "b", Path: pathB, Start: at(-1000)},
			{Service: svc, ID: "c", Path: pathC, Start: at(-1000), Stopping: at(9000), How: "sigterm"},
			{Service: svc, ID: "c", Path: pathC, Start: at(10000)},
		},
	}
}

// picks are the calls through gw from ms to until, one each 10 ms, by
// smooth weighted round robin over weights(t) (an instance weighed 0 or
// absent is out).
func picks(gw string, ms, until int, weights func(t time.Time) map[string]float64) []Request {
	var out []Request
	cur := map[string]float64{}
	for x := ms; x < until; x += 10 {
		t := at(x)
		ws := weights(t)
		ids := slices.Sorted(func(yield func(string) bool) {
			for id := range ws {
				if !yield(id) {
					return
				}
			}
		})
		total, best := 0.0, ""
		for _, id := range ids {
			if ws[id] <= 0 {
				continue
			}
			cur[id] += ws[id]
			total += ws[id]
			if best == "" || cur[id] > cur[best] {
				best = id
			}
		}
		if best == "" {
			continue
		}
		cur[best] -= total
		out = append(out, Request{At: t, Done: t.Add(50 * time.Millisecond), Gateway: gw, Instance: best})
	}
	return out
}

// ramped weighs c by the ramp from 10400 until lostAt, fully after it
// (lostAt zero: never lost).
func ramped(lostAt time.Time) func(time.Time) map[string]float64 {
	return func(t time.Time) map[string]float64 {
		ws := map[string]float64{"a": 1, "b": 1}
		if t.Before(at(10500)) {
			return ws
		}
		ws["c"] = testRamp.factor(at(10400), t)
		if !lostAt.IsZero() && !t.Before(lostAt) {
			ws["c"] = 1
		}
		return ws
	}
}

func TestRamp(t *testing.T) {
	tests := []struct {
		name     string
		give     func(h *History)
		bad      bool
		checks   int
		unverify int
	}{
		{
			name:   "a ramp that holds",
			give:   func(h *History) { h.Requests = picks("gw", 0, 25000, ramped(time.Time{})) },
			checks: 1,
		},
		{
			name: "no ramp at all",
			give: func(h *History) {
				h.Requests = picks("gw", 0, 25000, ramped(at(10500)))
			},
			bad: true, checks: 1,
		},
		{
			name: "a ramp lost a second in, at a rebuild",
			give: func(h *History) {
				h.Requests = picks("gw", 0, 25000, ramped(at(11400)))
			},
			bad: true, checks: 1,
		},
		{
			name: "a ramp lost past the half window is not seen",
			give: func(h *History) {
				h.Requests = picks("gw", 0, 25000, ramped(at(15500)))
			},
			checks: 1,
		},
		{
			name: "a ramp that holds while a peer is drained",
			give: func(h *History) {
				w := ramped(time.Time{})
				h.Requests = picks("gw", 0, 25000, func(t time.Time) map[string]float64 {
					ws := w(t)
					if t.After(at(11000)) && t.Before(at(14000)) {
						delete(ws, "b")
					}
					return ws
				})
			},
			checks: 1,
		},
		{
			name: "a ramp beside a peer that ramps too",
			give: func(h *History) {
				b2 := change(9500, Created, pathB, 21, "b:2", true)
				b2.Registered = at(9400)
				h.Truth = append(h.Truth, change(8000, Deleted, pathB, 11, "b:1", false), b2)
				h.Runs[1].Stopping = at(7900)
				h.Runs = append(h.Runs, Run{Service: svc, ID: "b", Path: pathB, Start: at(9000)})
				w := ramped(time.Time{})
				h.Requests = picks("gw", 0, 25000, func(t time.Time) map[string]float64 {
					ws := w(t)
					delete(ws, "a") // out: b is the only peer
					ws["b"] = testRamp.factor(at(9400), t)
					return ws
				})
			},
			checks: 2,
		},
		{
			name: "a gateway that does not ramp is not checked",
			give: func(h *History) {
				h.Requests = picks("grpc-go", 0, 25000, ramped(at(10500)))
			},
			unverify: 1, // gw made no calls
		},
		{
			name: "too few calls are unverified",
			give: func(h *History) {
				h.Requests = picks("gw", 0, 25000, ramped(at(10500)))
				var few []Request
				for i, q := range h.Requests {
					if i%20 == 0 {
						few = append(few, q)
					}
				}
				h.Requests = few
			},
			unverify: 1,
		},
		{
			name: "a run stopped before its registration is unverified",
			give: func(h *History) {
				h.Truth = h.Truth[:4]
				h.Requests = picks("gw", 0, 25000, ramped(at(10500)))
			},
			unverify: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := restarted()
			tt.give(h)
			r := Ramp(h)
			if got := len(r.Violations) > 0; got != tt.bad {
				t.Fatalf("violations %v, want bad=%v", r.Violations, tt.bad)
			}
			if r.Checks != tt.checks || r.Unverified != tt.unverify {
				t.Errorf("%d checks, %d unverified; want %d, %d", r.Checks, r.Unverified, tt.checks, tt.unverify)
			}
			for _, v := range r.Violations {
				if v.Check != CheckRamp || v.Consumer != "gw" || !strings.Contains(v.What, "c restarted") {
					t.Errorf("violation %+v: want %s through gw naming c", v, CheckRamp)
				}
			}
		})
	}
}

// Check runs Ramp, and a history without a ramp checks nothing.
func TestCheckRunsRamp(t *testing.T) {
	h := restarted()
	h.Requests = picks("gw", 0, 25000, ramped(at(10500)))
	r := Check(h, DefaultBounds)
	if r.ByCheck[CheckRamp] != 1 || !hasCheck(r.Violations, CheckRamp) {
		t.Fatalf("Check: ramp checks %d, violations %v", r.ByCheck[CheckRamp], r.Violations)
	}
	h.SlowStart = nil
	if r := Ramp(h); r.Checks != 0 || len(r.Violations) != 0 {
		t.Fatalf("without SlowStart: %+v", r)
	}
}

func TestSlowStartFactorIsEndpointsRule(t *testing.T) {
	s := SlowStart{Window: 10 * time.Second, Aggression: 2, MinWeight: 0.1}
	for _, tt := range []struct {
		give time.Duration
		want float64
	}{
		{-time.Second, 0.1}, {0, 0.1}, {100 * time.Millisecond, 0.1}, {2500 * time.Millisecond, 0.5}, {10 * time.Second, 1}, {time.Minute, 1},
	} {
		if got := s.factor(t0, t0.Add(tt.give)); got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("factor at age %v = %v, want %v", tt.give, got, tt.want)
		}
	}
}
