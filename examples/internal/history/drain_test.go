package history

import "testing"

func drainWrite(op string, sent, acked int) Written {
	want := WantOut
	if op == "undrain" {
		want = WantUp
	}
	return Written{Op: op, Path: pathA, Want: want, Sent: at(sent), Acked: at(acked)}
}

// drained is traced() with a drained at 2000 (acked 2100); Leave 1s and
// Skew 1s put the limit at 4100.
func drained(extra ...Written) *History {
	h := traced()
	h.Writes = append([]Written{drainWrite("drain", 2000, 2100)}, extra...)
	return h
}

func TestAfterDrain(t *testing.T) {
	for _, c := range []struct {
		name string
		h    func() *History
		bad  bool
	}{
		{"served long after the drain", func() *History {
			h := drained()
			h.Requests = append(h.Requests, req(6000, "gw-1", "a"))
			return h
		}, true},
		{"served within the bound", func() *History {
			h := drained()
			h.Requests = append(h.Requests, req(3500, "gw-1", "a"))
			h.Requests = withoutAt(h.Requests, 9000)
			return h
		}, false},
		{"undrain in between", func() *History {
			h := drained(drainWrite("undrain", 5000, 5100))
			h.Requests = withoutAt(h.Requests, 9000)
			h.Requests = append(h.Requests, req(6000, "gw-1", "a"))
			return h
		}, false},
		{"drain, undrain, drain again", func() *History {
			h := drained(drainWrite("undrain", 5000, 5100), drainWrite("drain", 5200, 5300))
			h.Requests = withoutAt(h.Requests, 9000)
			h.Requests = append(h.Requests, req(6000, "gw-1", "a"), req(8000, "gw-1", "a"))
			return h
		}, true},
		{"restart is a new life", func() *History {
			h := drained()
			h.Runs[0].Stopping = at(3000)
			h.Runs = append(h.Runs, Run{Service: svc, ID: "a", Path: pathA, Start: at(3500)})
			h.Requests = append(h.Requests, req(6000, "gw-1", "a"))
			return h
		}, false},
		{"gateway blind", func() *History {
			h := drained()
			h.Blinds = []Blind{{Target: "*", From: at(2500), To: at(7000)}}
			h.Requests = withoutAt(h.Requests, 9000)
			h.Requests = append(h.Requests, req(6000, "gw-1", "a"))
			return h
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := AfterDrain(c.h(), traceBounds)
			if got := len(r.Violations) > 0; got != c.bad {
				t.Fatalf("violations=%v, want bad=%v", r.Violations, c.bad)
			}
			for _, v := range r.Violations {
				if v.Check != CheckAfterDrain {
					t.Fatalf("check %q, want %q", v.Check, CheckAfterDrain)
				}
			}
		})
	}
}

// withoutAt drops the requests at ms.
func withoutAt(qs []Request, ms int) []Request {
	var out []Request
	for _, q := range qs {
		if !q.At.Equal(at(ms)) {
			out = append(out, q)
		}
	}
	return out
}
