package history

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// CheckAfterSick and CheckDrainHeld are the names of AfterSick's and
// DrainHeld's violations.
const (
	CheckAfterSick = "after-sick"
	CheckDrainHeld = "drain-held"
)

// Sick is a time the schedule made an instance's health check fail, from
// From until To (it was made well again).
type Sick struct {
	Service string    `json:"service"`
	ID      string    `json:"id"`
	Path    string    `json:"path"`
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	// Detect is how long the provider may take to decide and write its
	// verdict, from its own settings: Interval × (Failures+1), plus Hold,
	// plus the status write's bound (2 × Interval).
	Detect time.Duration `json:"detect"`
	// ZKFault: an ensemble fault (a member, the leader, the whole
	// ensemble, a lagging member) overlapped it; the status write may
	// wait for it, so the registry's side is unverified.
	ZKFault bool `json:"zk_fault,omitempty"`
}

// AfterSick checks what the schedule's health faults promise: within
// Detect + Skew of the check failing, the registry shows the instance out
// (its failed check reached ZooKeeper), and no request reached it more
// than Detect + Leave + Skew after the check failed, until it was well
// again. A sickness shorter than a bound is unverified for it, as is one
// a truth gap, an ensemble fault or its run's end overlapped, and a
// request through a gateway a fault kept from ZooKeeper.
func AfterSick(h *History, t *Truth, b Bounds) Report {
	var r Report
	bound := leave(h, b)
	for _, s := range h.Sick {
		var regs []*Registration
		for _, g := range t.regs {
			if g.Key.Path == s.Path {
				regs = append(regs, g)
			}
		}
		run := runOf(h.Runs, s.ID, s.From)
		ended := run == nil || (!run.Stopping.IsZero() && run.Stopping.Before(s.To)) || !nextStart(h.Runs, s.ID, s.From).IsZero() && nextStart(h.Runs, s.ID, s.From).Before(s.To)
		// The registry's side: out within Detect + Skew.
		by := s.From.Add(s.Detect + b.Skew)
		switch {
		case s.To.Before(by) || by.After(h.End):
			r.Unverified++
		case ended, s.ZKFault, t.blind(s.From, by), len(regs) == 0, gatewayBlind(h.Blinds, "*", s.From, by):
			r.Unverified++
		default:
			r.Checks++
			cands := []time.Time{by}
			for _, g := range regs {
				for _, sp := range g.ups {
					if !sp.to.IsZero() && !sp.to.Before(s.From) && !sp.to.After(by) {
						cands = append(cands, sp.to)
					}
				}
				if !g.Deleted.IsZero() && !g.Deleted.Before(s.From) && !g.Deleted.After(by) {
					cands = append(cands, g.Deleted)
				}
			}
			out := slices.ContainsFunc(cands, func(c time.Time) bool {
				return !slices.ContainsFunc(regs, func(g *Registration) bool { return g.upAt(c) })
			})
			if !out {
				r.Violations = append(r.Violations, Violation{Check: CheckAfterSick, At: by, Service: s.Service,
					What: fmt.Sprintf("%s's health check failed from %s to %s: ZooKeeper still showed it UP at %s (%v + %v after)",
						s.ID, ts(s.From), ts(s.To), ts(by), s.Detect, b.Skew)})
			}
		}
		// The calls' side: none later than Detect + Leave + Skew.
		calls := s.From.Add(s.Detect + bound + b.Skew)
		if !calls.Before(s.To) || ended {
			r.Unverified++
			continue
		}
		bad := map[string][]time.Time{}
		for _, q := range h.Requests {
			if q.Failed || q.Instance != s.ID || !q.At.After(calls) || !q.At.Before(s.To) {
				continue
			}
			if gatewayBlind(h.Blinds, q.Gateway, s.From, q.At) {
				r.Unverified++
				continue
			}
			bad[q.Gateway] = append(bad[q.Gateway], q.At)
		}
		r.Checks++
		gws := make([]string, 0, len(bad))
		for gw := range bad {
			gws = append(gws, gw)
		}
		slices.Sort(gws)
		for _, gw := range gws {
			qs := bad[gw]
			r.Violations = append(r.Violations, Violation{Check: CheckAfterSick, At: qs[0], Consumer: gw, Service: s.Service,
				What: fmt.Sprintf("%d requests reached %s more than %v after its health check failed at %s (still sick until %s), from %s to %s",
					len(qs), s.ID, s.Detect+bound+b.Skew, ts(s.From), ts(s.To), ts(qs[0]), ts(qs[len(qs)-1]))})
		}
	}
	return r
}

// DrainHeld checks that the registry keeps a drained instance out: from
// an acknowledged operator drain (plus Skew) until the next undrain sent
// for its node, or the end of the run it hit, no registration at its path
// is UP, and the drained provider's readiness, as far as the driver
// sampled it (ReadySample), is not ready once the leave bound passed. A
// Registrar that re-creates its node after an expiry carries the
// drain into it; one that writes UP over it, or forgets it, breaks this.
// What a truth gap hides is unverified.
func DrainHeld(h *History, t *Truth, b Bounds) Report {
	var r Report
	byPath := map[string][]*Registration{}
	for _, g := range t.regs {
		byPath[g.Key.Path] = append(byPath[g.Key.Path], g)
	}
	for _, w := range h.Writes {
		if w.Op != "drain" || w.Acked.IsZero() {
			continue
		}
		run := runAtOrBefore(h.Runs, w.Path, w.Sent)
		if run == nil {
			continue
		}
		to := nextStart(h.Runs, run.ID, run.Start)
		if !run.Stopping.IsZero() && (to.IsZero() || run.Stopping.Before(to)) {
			to = run.Stopping
		}
		for _, u := range h.Writes {
			if u.Op == "undrain" && u.Path == w.Path && u.Sent.After(w.Sent) && (to.IsZero() || u.Sent.Before(to)) {
				to = u.Sent
			}
		}
		if to.IsZero() {
			to = h.End
		}
		from := w.Acked.Add(b.Skew)
		if !from.Before(to) {
			continue
		}
		var ups []string
		for _, g := range byPath[w.Path] {
			for _, sp := range g.ups {
				if sp.from.Before(to) && (sp.to.IsZero() || sp.to.After(from)) {
					at := sp.from
					if at.Before(from) {
						at = from
					}
					ups = append(ups, fmt.Sprintf("czxid %d UP at %s", g.Key.Czxid, ts(at)))
				}
			}
		}
		// The provider's side: it learns of the drain through its
		// Registrar's watch, so its readiness is held to the leave bound.
		var readies []time.Time
		sampled := false
		seen := from.Add(leave(h, b))
		for _, q := range h.Ready {
			if q.Path == w.Path && q.ID == run.ID && q.At.After(seen) && q.At.Before(to) {
				sampled = true
				if q.Ready {
					readies = append(readies, q.At)
				}
			}
		}
		if sampled {
			r.Checks++
		}
		if len(readies) > 0 {
			r.Violations = append(r.Violations, Violation{Check: CheckDrainHeld, At: readies[0], Service: run.Service,
				What: fmt.Sprintf("%s drained (acknowledged %s), not undrained before %s: %s answered ready %d times more than %v after, from %s to %s",
					w.Path, ts(w.Acked), ts(to), run.ID, len(readies), leave(h, b)+b.Skew, ts(readies[0]), ts(readies[len(readies)-1]))})
		}
		if len(ups) > 0 && t.blind(from, to) {
			r.Unverified++
			continue
		}
		r.Checks++
		if len(ups) > 0 {
			r.Violations = append(r.Violations, Violation{Check: CheckDrainHeld, At: from, Service: run.Service,
				What: fmt.Sprintf("%s drained (acknowledged %s), not undrained before %s: ZooKeeper showed it UP meanwhile: %s",
					w.Path, ts(w.Acked), ts(to), strings.Join(ups, "; "))})
		}
	}
	return r
}

// ReadySample is one answer of a provider's readiness (/readyz, or its
// gRPC health service) to the driver, at At.
type ReadySample struct {
	ID    string    `json:"id"`
	Path  string    `json:"path"`
	At    time.Time `json:"at"`
	Ready bool      `json:"ready"`
}

// runAtOrBefore is the latest run of path started at or before t.
func runAtOrBefore(runs []Run, path string, t time.Time) *Run {
	var out *Run
	for i := range runs {
		x := &runs[i]
		if x.Path == path && !x.Start.After(t) && (out == nil || x.Start.After(out.Start)) {
			out = x
		}
	}
	return out
}
