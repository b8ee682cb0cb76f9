package history

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// leave and starve are b's bounds, or the ones the run's session
// timeout gives when b leaves them zero.
func leave(h *History, b Bounds) time.Duration {
	if b.Leave > 0 {
		return b.Leave
	}
	return h.SessionTimeout
}

func starve(h *History, b Bounds) time.Duration {
	if b.Starve > 0 {
		return b.Starve
	}
	return b.Converge + 2*h.SessionTimeout
}

// nextStart is when id's next run after t began; zero when none did.
func nextStart(runs []Run, id string, t time.Time) time.Time {
	var out time.Time
	for _, r := range runs {
		if r.ID == id && r.Start.After(t) && (out.IsZero() || r.Start.Before(out)) {
			out = r.Start
		}
	}
	return out
}

// runOf is id's run that had begun at t: the latest started.
func runOf(runs []Run, id string, t time.Time) *Run {
	var out *Run
	for i := range runs {
		r := &runs[i]
		if r.ID == id && !r.Start.After(t) && (out == nil || r.Start.After(out.Start)) {
			out = r
		}
	}
	return out
}

func before(t, limit time.Time) bool { return limit.IsZero() || t.Before(limit) }

// FlushAck checks that no request a gateway sent more than b.Skew after
// it acked a stop's flush reached the stopping instance (until the
// instance's next run began).
func FlushAck(h *History, b Bounds) Report {
	var r Report
	for _, s := range h.Stops {
		until := nextStart(h.Runs, s.ID, s.Signal)
		for _, a := range s.Acks {
			if !a.Acked || a.Gateway == "" {
				continue
			}
			r.Checks++
			n, first := 0, time.Time{}
			for _, q := range h.Requests {
				if q.Failed || q.Instance != s.ID || q.Gateway != a.Gateway || !q.At.After(a.At.Add(b.Skew)) || !before(q.At, until) {
					continue
				}
				if n == 0 || q.At.Before(first) {
					first = q.At
				}
				n++
			}
			if n > 0 {
				r.Violations = append(r.Violations, Violation{Check: CheckFlushAck, At: first, Consumer: a.Gateway, Service: s.Service,
					What: fmt.Sprintf("%d requests reached %s after %s acked its flush at %s, the first sent at %s, %v after",
						n, s.ID, a.Gateway, ts(a.At), ts(first), first.Sub(a.At).Round(time.Millisecond))})
			}
		}
	}
	return r
}

// AfterLeave checks that every request an instance served came at most
// Bounds.Leave after ZooKeeper last showed it UP: once it is deregistered,
// OUT_OF_SERVICE or drained, a gateway that can see ZooKeeper stops
// routing to it. A request a truth gap or a fault that kept its gateway
// from ZooKeeper hides is unverified.
func AfterLeave(h *History, t *Truth, b Bounds) Report {
	var r Report
	bound := leave(h, b)
	byPath := map[string][]*Registration{}
	for _, g := range t.regs {
		byPath[g.Key.Path] = append(byPath[g.Key.Path], g)
	}
	type agg struct {
		n     int
		first Request
		last  time.Time
	}
	bad := map[string]*agg{} // gateway \x00 instance
	for _, q := range h.Requests {
		if q.Failed || q.Instance == "" {
			continue
		}
		run := runOf(h.Runs, q.Instance, q.At)
		if run == nil {
			continue
		}
		regs := byPath[run.Path]
		from, to := q.At.Add(-bound), q.At.Add(b.Skew)
		if slices.ContainsFunc(regs, func(g *Registration) bool { return g.UpWithin(from, to) }) {
			r.Checks++
			continue
		}
		if len(regs) == 0 || t.blind(from, to) || gatewayBlind(h.Blinds, q.Gateway, from, q.At) {
			r.Unverified++
			continue
		}
		r.Checks++
		k := q.Gateway + "\x00" + q.Instance
		if bad[k] == nil {
			bad[k] = &agg{first: q}
		}
		bad[k].n++
		bad[k].last = q.At
	}
	keys := make([]string, 0, len(bad))
	for k := range bad {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		a := bad[k]
		gw, id, _ := strings.Cut(k, "\x00")
		run := runOf(h.Runs, id, a.first.At)
		last := "never"
		for _, g := range byPath[run.Path] {
			if up := g.lastUp(); !up.IsZero() && up.Before(a.first.At) {
				last = ts(up)
			}
		}
		r.Violations = append(r.Violations, Violation{Check: CheckAfterLeave, At: a.first.At, Consumer: gw, Service: run.Service,
			What: fmt.Sprintf("%d requests reached %s more than %v after ZooKeeper last showed it UP (%s), from %s to %s",
				a.n, id, bound, last, ts(a.first.At), ts(a.last))})
	}
	return r
}

// gatewayBlind tells whether a fault kept gw from ZooKeeper at some time
// in [from, to].
func gatewayBlind(blinds []Blind, gw string, from, to time.Time) bool {
	return slices.ContainsFunc(blinds, func(bl Blind) bool {
		return (bl.Target == gw || bl.Target == "*") && !bl.From.After(to) && !bl.To.Before(from)
	})
}

// FlushReach checks that each stop's flush was acked by every gateway
// that routed to the instance in the run it ended, among the gateways
// that take flushes (those any stop of the run named). A stop whose flush
// reached no gateway while some routed to it is a violation too.
func FlushReach(h *History) Report {
	var r Report
	flushable := map[string]bool{}
	for _, s := range h.Stops {
		for _, a := range s.Acks {
			if a.Gateway != "" {
				flushable[a.Gateway] = true
			}
		}
	}
	for _, s := range h.Stops {
		run := runOf(h.Runs, s.ID, s.Signal)
		if run == nil {
			continue
		}
		routed := map[string]bool{}
		for _, q := range h.Requests {
			if !q.Failed && q.Instance == s.ID && !q.At.Before(run.Start) && q.At.Before(s.Signal) {
				routed[q.Gateway] = true
			}
		}
		if len(routed) == 0 {
			continue
		}
		r.Checks++
		acked := map[string]bool{}
		for _, a := range s.Acks {
			if a.Acked {
				acked[a.Gateway] = true
			}
		}
		var missed []string
		for gw := range routed {
			if (len(flushable) == 0 || flushable[gw]) && !acked[gw] {
				missed = append(missed, gw)
			}
		}
		if len(s.Acks) == 0 || len(missed) > 0 {
			slices.Sort(missed)
			r.Violations = append(r.Violations, Violation{Check: CheckFlushReach, At: s.Signal, Service: s.Service,
				What: fmt.Sprintf("the stop of %s at %s: %d flush targets, not acked by %s, which routed to it",
					s.ID, ts(s.Signal), len(s.Acks), strings.Join(missed, ","))})
		}
	}
	return r
}

// Starved checks that each run of a service the load reaches got a call
// within Bounds.Starve of its start (when it lived that long): the
// schedule's healthy instances are not silently starved.
func Starved(h *History, b Bounds) Report {
	var r Report
	bound := starve(h, b)
	served := map[string]bool{}   // instance ids that served
	services := map[string]bool{} // services the load reaches
	for _, q := range h.Requests {
		if !q.Failed && q.Instance != "" {
			served[q.Instance] = true
		}
	}
	for _, rn := range h.Runs {
		if served[rn.ID] {
			services[rn.Service] = true
		}
	}
	for _, rn := range h.Runs {
		if !services[rn.Service] {
			continue
		}
		deadline := rn.Start.Add(bound)
		end := rn.Stopping
		if end.IsZero() {
			end = h.End
		}
		if end.Before(deadline) {
			r.Unverified++
			continue
		}
		r.Checks++
		if slices.ContainsFunc(h.Requests, func(q Request) bool {
			return !q.Failed && q.Instance == rn.ID && !q.At.Before(rn.Start) && !q.At.After(deadline)
		}) {
			continue
		}
		r.Violations = append(r.Violations, Violation{Check: CheckStarved, At: deadline, Service: rn.Service,
			What: fmt.Sprintf("%s started at %s and got no call by %s (%v)", rn.ID, ts(rn.Start), ts(deadline), bound)})
	}
	return r
}
