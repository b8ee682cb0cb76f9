package history

import (
	"fmt"
	"time"
)

// CheckWriteAck is the name of WriteAck's violations.
const CheckWriteAck = "write-ack"

// The states a write may promise.
const (
	WantUp     = "up"     // registered, status UP (Register, Undrain, SetStatus UP)
	WantOut    = "out"    // registered, not UP (SetStatus OUT_OF_SERVICE, Drain)
	WantAbsent = "absent" // no node (Deregister)
)

// Written is one write the run made and the library (or the driver's own
// ZooKeeper client) acknowledged at Acked.
type Written struct {
	Op    string    `json:"op"` // register, set-status, drain, undrain, deregister
	Path  string    `json:"path"`
	Want  string    `json:"want"`
	Sent  time.Time `json:"sent"`
	Acked time.Time `json:"acked"`
}

func (g *Registration) alive(t time.Time) bool {
	return !g.Created.After(t) && (g.Deleted.IsZero() || t.Before(g.Deleted))
}

func (g *Registration) upAt(t time.Time) bool {
	for _, s := range g.ups {
		if !s.from.After(t) && (s.to.IsZero() || t.Before(s.to)) {
			return true
		}
	}
	return false
}

// WriteAck checks that the registry held what each acknowledged write
// promised at some time between the write's call and its ack (plus
// b.Skew): the truth is timed by ZooKeeper's stamps, so the state the
// write made is in it by then, even if a later change undid it.
func WriteAck(h *History, t *Truth, b Bounds) Report {
	var r Report
	byPath := map[string][]*Registration{}
	for _, g := range t.regs {
		byPath[g.Key.Path] = append(byPath[g.Key.Path], g)
	}
	for _, w := range h.Writes {
		from, to := w.Sent, w.Acked.Add(b.Skew)
		if to.After(h.End) || t.blind(from, to) {
			r.Unverified++
			continue
		}
		regs := byPath[w.Path]
		cands := []time.Time{from, to}
		for _, g := range regs {
			cands = append(cands, g.Created, g.Deleted)
			for _, s := range g.ups {
				cands = append(cands, s.from, s.to)
			}
		}
		held := false
		for _, c := range cands {
			if c.IsZero() || c.Before(from) || c.After(to) {
				continue
			}
			alive, up := false, false
			for _, g := range regs {
				if g.alive(c) {
					alive = true
					up = up || g.upAt(c)
				}
			}
			switch w.Want {
			case WantUp:
				held = up
			case WantOut:
				held = alive && !up
			case WantAbsent:
				held = !alive
			}
			if held {
				break
			}
		}
		r.Checks++
		if !held {
			r.Violations = append(r.Violations, Violation{Check: CheckWriteAck, At: w.Acked,
				What: fmt.Sprintf("%s of %s acknowledged at %s (sent %s): ZooKeeper never held it %s in between", w.Op, w.Path, ts(w.Acked), ts(w.Sent), w.Want)})
		}
	}
	return r
}
