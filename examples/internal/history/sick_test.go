package history

import (
	"testing"
	"time"
)

// sickA is traced() with a made sick from 2000 to 12000, Detect 1s: the
// registry must show it out by 3000 (Skew 1s), and no call may reach it
// after 5000 (Leave 1s in traceBounds), until 12000.
func sickA(extra ...Change) *History {
	h := traced()
	h.Sick = []Sick{{Service: svc, ID: "a", Path: pathA, From: at(2000), To: at(12000), Detect: time.Second}}
	h.Truth = append(h.Truth, extra...)
	h.Requests = withoutAt(h.Requests, 9000)
	return h
}

func TestAfterSick(t *testing.T) {
	out := change(2600, Changed, pathA, 10, "a:1", false)
	for _, c := range []struct {
		name string
		h    func() *History
		bad  bool
	}{
		{"out in time, no late call", func() *History { return sickA(out) }, false},
		{"never out in the registry", func() *History { return sickA() }, true},
		{"out too late", func() *History { return sickA(change(4500, Changed, pathA, 10, "a:1", false)) }, true},
		{"a call after the bound", func() *History {
			h := sickA(out)
			h.Requests = append(h.Requests, req(6000, "gw-1", "a"))
			return h
		}, true},
		{"a call within the bound", func() *History {
			h := sickA(out)
			h.Requests = append(h.Requests, req(4500, "gw-1", "a"))
			return h
		}, false},
		{"a call after it was well", func() *History {
			h := sickA(out)
			h.Requests = append(h.Requests, req(12500, "gw-1", "a"))
			return h
		}, false},
		{"an ensemble fault: the registry's side unverified", func() *History {
			h := sickA()
			h.Sick[0].ZKFault = true
			return h
		}, false},
		{"too short to tell", func() *History {
			h := sickA()
			h.Sick[0].To = at(2500)
			return h
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := c.h()
			r := AfterSick(h, NewTruth(h), traceBounds)
			if got := len(r.Violations) > 0; got != c.bad {
				t.Fatalf("violations=%v, want bad=%v", r.Violations, c.bad)
			}
			for _, v := range r.Violations {
				if v.Check != CheckAfterSick {
					t.Fatalf("check %q, want %q", v.Check, CheckAfterSick)
				}
			}
		})
	}
}

func TestDrainHeld(t *testing.T) {
	drainOut := change(2050, Changed, pathA, 10, "a:1", false)
	for _, c := range []struct {
		name string
		h    func() *History
		bad  bool
	}{
		{"out until the undrain", func() *History {
			h := drained(drainWrite("undrain", 6000, 6100))
			h.Truth = append(h.Truth, drainOut, change(6050, Changed, pathA, 10, "a:1", true))
			return h
		}, false},
		{"re-created drained after an expiry", func() *History {
			h := drained(drainWrite("undrain", 8000, 8100))
			h.Truth = append(h.Truth, drainOut, change(4000, Deleted, pathA, 10, "a:1", false),
				change(4500, Created, pathA, 20, "a:1", false), change(8050, Changed, pathA, 20, "a:1", true))
			return h
		}, false},
		{"re-created UP after an expiry: the drain forgotten", func() *History {
			h := drained(drainWrite("undrain", 8000, 8100))
			h.Truth = append(h.Truth, drainOut, change(4000, Deleted, pathA, 10, "a:1", false),
				change(4500, Created, pathA, 20, "a:1", true))
			return h
		}, true},
		{"written UP over the drain", func() *History {
			h := drained()
			h.Truth = append(h.Truth, drainOut, change(5000, Changed, pathA, 10, "a:1", true))
			return h
		}, true},
		{"not ready once the provider could see the drain", func() *History {
			h := drained(drainWrite("undrain", 6000, 6100))
			h.Truth = append(h.Truth, drainOut, change(6050, Changed, pathA, 10, "a:1", true))
			h.Ready = readies(false, 2500, 3500, 4500, 5500)
			h.Ready = append(h.Ready, readies(true, 3000, 3900, 6500)...) // within the bound, and after the undrain
			return h
		}, false},
		{"ready while drained: a health recovery over the drain", func() *History {
			h := drained(drainWrite("undrain", 6000, 6100))
			h.Truth = append(h.Truth, drainOut, change(6050, Changed, pathA, 10, "a:1", true))
			h.Ready = append(readies(false, 2500, 3500), readies(true, 4500, 5500)...)
			return h
		}, true},
		{"the run stopped: a restart is a new life", func() *History {
			h := drained()
			h.Runs[0].Stopping = at(5000)
			h.Runs = append(h.Runs, Run{Service: svc, ID: "a", Path: pathA, Start: at(5500)})
			h.Truth = append(h.Truth, drainOut, change(5200, Deleted, pathA, 10, "a:1", false), change(5600, Created, pathA, 20, "a:1", true))
			return h
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := c.h()
			r := DrainHeld(h, NewTruth(h), traceBounds)
			if got := len(r.Violations) > 0; got != c.bad {
				t.Fatalf("violations=%v, want bad=%v", r.Violations, c.bad)
			}
			want := 1
			if len(h.Ready) > 0 {
				want = 2 // the registry's side and the provider's
			}
			if r.Checks != want {
				t.Errorf("%d checks, want %d", r.Checks, want)
			}
		})
	}
}

// readies are a's readiness samples at ms, each ready or not.
func readies(ready bool, ms ...int) []ReadySample {
	var out []ReadySample
	for _, m := range ms {
		out = append(out, ReadySample{ID: "a", Path: pathA, At: at(m), Ready: ready})
	}
	return out
}
