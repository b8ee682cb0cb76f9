package history

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// CheckMinUp is the name of MinUp's violations.
const CheckMinUp = "min-up"

// Guard is a min-up step: operators draining instances of one service at
// once, each with gracekit drain -min-up MinUp, from From until every
// drain that landed was undrained (To).
type Guard struct {
	Service string    `json:"service"`
	MinUp   int       `json:"min_up"`
	IDs     []string  `json:"ids"` // every instance of the service, drained or not
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	What    string    `json:"what,omitempty"` // the operators and what each got
}

// MinUp checks each min-up step against the truth: at no time between
// its start and its end are fewer than MinUp of the service's instances
// free of an operator's drain. A drain lands only when at least MinUp
// others are UP and undrained when it lands (its write and a version
// check of each node it counted are one multi), so the drains can never
// take more than len(IDs)-MinUp instances out together. The UP count
// itself may fall lower only through what the schedule did to the
// instances (a stop, a kill, a health flip, an expiry): those are not
// drains, and are not counted against the guard.
func MinUp(h *History, t *Truth) Report {
	var r Report
	for _, g := range h.Guards {
		ids := map[string]bool{}
		for _, id := range g.IDs {
			ids[id] = true
		}
		var regs []*Registration
		cands := []time.Time{g.From}
		for _, x := range t.regs {
			if x.Service != g.Service || !ids[x.ID] {
				continue
			}
			regs = append(regs, x)
			for _, s := range x.drains {
				cands = append(cands, s.from)
			}
		}
		slices.SortFunc(cands, time.Time.Compare)
		r.Checks++
		for _, c := range cands {
			if c.Before(g.From) || c.After(g.To) {
				continue
			}
			drained := map[string]bool{}
			for _, x := range regs {
				if x.alive(c) && x.drainedAt(c) {
					drained[x.ID] = true
				}
			}
			if free := len(g.IDs) - len(drained); free < g.MinUp {
				names := make([]string, 0, len(drained))
				for id := range drained {
					names = append(names, id)
				}
				slices.Sort(names)
				r.Violations = append(r.Violations, Violation{Check: CheckMinUp, At: c, Service: g.Service,
					What: fmt.Sprintf("at %s operators' drains held %s of %d instances at once: %d left undrained, fewer than -min-up %d (the step from %s: %s)",
						ts(c), strings.Join(names, ","), len(g.IDs), free, g.MinUp, ts(g.From), g.What)})
				break
			}
		}
	}
	return r
}
