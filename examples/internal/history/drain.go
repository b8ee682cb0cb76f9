package history

import (
	"fmt"
	"slices"
	"time"
)

// CheckAfterDrain is the name of AfterDrain's violations.
const CheckAfterDrain = "after-drain"

// AfterDrain checks that no request reached an instance more than the
// leave bound after an acknowledged operator drain of it. A drain holds
// until the next undrain sent for the same node, or until the run it hit
// ends: a stop (Stopping) hands over to flush-ack and after-leave, and a
// restart is a new life with a new registration, so the drain does not
// follow it. Requests while the gateway was blind are unverified, as in
// AfterLeave.
func AfterDrain(h *History, b Bounds) Report {
	var r Report
	bound := leave(h, b)
	type window struct {
		run      *Run
		from, to time.Time // from: ack + bound; to: zero means open
		acked    time.Time
	}
	var wins []window
	for _, w := range h.Writes {
		if w.Op != "drain" || w.Acked.IsZero() {
			continue
		}
		var run *Run
		for i := range h.Runs {
			x := &h.Runs[i]
			if x.Path == w.Path && !x.Start.After(w.Sent) && (run == nil || x.Start.After(run.Start)) {
				run = x
			}
		}
		if run == nil {
			continue
		}
		end := nextStart(h.Runs, run.ID, run.Start)
		if !run.Stopping.IsZero() && (end.IsZero() || run.Stopping.Before(end)) {
			end = run.Stopping
		}
		for _, u := range h.Writes {
			if u.Op == "undrain" && u.Path == w.Path && u.Sent.After(w.Sent) && (end.IsZero() || u.Sent.Before(end)) {
				end = u.Sent
			}
		}
		wins = append(wins, window{run: run, from: w.Acked.Add(bound), to: end, acked: w.Acked})
	}
	type agg struct {
		n           int
		first, last time.Time
		acked       time.Time
	}
	bad := map[string]*agg{}
	var keys []string
	for _, q := range h.Requests {
		if q.Failed || q.Instance == "" {
			continue
		}
		i := slices.IndexFunc(wins, func(w window) bool {
			return w.run.ID == q.Instance && q.At.After(w.from.Add(b.Skew)) && (w.to.IsZero() || q.At.Before(w.to))
		})
		if i < 0 {
			continue
		}
		if gatewayBlind(h.Blinds, q.Gateway, wins[i].acked, q.At) {
			r.Unverified++
			continue
		}
		r.Checks++
		k := q.Gateway + "\x00" + q.Instance
		if bad[k] == nil {
			bad[k] = &agg{first: q.At, acked: wins[i].acked}
			keys = append(keys, k)
		}
		bad[k].n++
		bad[k].last = q.At
	}
	slices.Sort(keys)
	for _, k := range keys {
		a := bad[k]
		i := slices.Index([]byte(k), 0)
		gw, id := k[:i], k[i+1:]
		svc := ""
		if run := runOf(h.Runs, id, a.first); run != nil {
			svc = run.Service
		}
		r.Violations = append(r.Violations, Violation{Check: CheckAfterDrain, At: a.first, Consumer: gw, Service: svc,
			What: fmt.Sprintf("%d requests reached %s more than %v after its drain was acknowledged (%s), from %s to %s",
				a.n, id, bound, ts(a.acked), ts(a.first), ts(a.last))})
	}
	return r
}
