package history

import (
	"fmt"
	"math"
	"time"
)

// CheckRamp is the name of Ramp's violations.
const CheckRamp = "ramp"

// SlowStart is the ramp some gateways of the run apply
// (endpoint.WithSlowStart): docs/SLOWSTART.md's rule.
type SlowStart struct {
	Window     time.Duration `json:"window"`
	Aggression float64       `json:"aggression"`
	MinWeight  float64       `json:"min_weight"`
	Gateways   []string      `json:"gateways"` // the gateways that ramp; the others are not checked
}

// factor is the share of its full weight an instance registered at reg
// has at t: endpoint.SlowStart.Factor's documented curve, written again on
// purpose, so that a bug planted in the library's own is not the oracle.
func (s *SlowStart) factor(reg, t time.Time) float64 {
	age := t.Sub(reg)
	if age >= s.Window {
		return 1
	}
	if age <= 0 {
		return s.MinWeight
	}
	f := float64(age) / float64(s.Window)
	if s.Aggression != 1 {
		f = math.Pow(f, 1/s.Aggression)
	}
	return max(s.MinWeight, f)
}

// The ramp's tolerance: over the first half of its window, a restarted
// instance may get rampSlack more calls than its weights allow, plus
// rampCalls (round robin's phase, retries, requests in flight at a bucket's
// edge). A ramp that is lost gets about twice what it allows there.
const (
	rampSlack   = 0.3
	rampCalls   = 10
	rampBuckets = 10 // of the half window: each bucket is bounded by the weight at its end
	rampMinPeer = 40 // calls of the busiest peer below which the check is unverified
)

// Ramp checks that a restarted instance ramps in: through each gateway
// that ramps (h.SlowStart), a run that is not its instance's first gets,
// over the first half of its window (from its node's registration time),
// no more calls than its weight allows against its busiest peer, within
// the tolerance above. Each bucket of the half window allows the busiest
// peer's calls times the restarted instance's weight at the bucket's end
// over that peer's least weight in the bucket (a peer that itself
// ramps weighs less): the ratio round robin keeps between two available
// instances, whatever else is out. Runs not in the ramp's gateways, and
// gateways that ramp nothing (grpc-go's round_robin), are not checked.
func Ramp(h *History) Report {
	var r Report
	s := h.SlowStart
	if s == nil || s.Window <= 0 {
		return r
	}
	half := s.Window / 2
	bucket := half / rampBuckets
	seen := map[string]bool{}
	for i, run := range h.Runs {
		key := run.Service + "/" + run.ID
		first := !seen[key]
		seen[key] = true
		if first {
			continue
		}
		reg, ok := h.registeredAfter(run.Service, run.ID, run.Start)
		if !ok {
			r.Unverified++
			continue
		}
		end := reg.Add(half)
		if !run.Stopping.IsZero() && run.Stopping.Before(end) {
			end = run.Stopping
		}
		if !h.End.IsZero() && h.End.Before(end) {
			end = h.End
		}
		for _, gw := range s.Gateways {
			var got, allowed float64
			var peerCalls int
			worst := ""
			for b := reg; b.Before(end); b = b.Add(bucket) {
				e := b.Add(bucket)
				if e.After(end) {
					e = end
				}
				mine, peers := h.callsIn(gw, run.ID, b, e)
				best, bestN := "", 0
				for id, n := range peers {
					if n > bestN || n == bestN && id < best {
						best, bestN = id, n
					}
				}
				if best == "" {
					got += float64(mine)
					continue
				}
				pw := h.peerWeight(s, run.Service, best, b, i)
				allow := float64(bestN) * s.factor(reg, e) / pw
				got += float64(mine)
				allowed += allow
				peerCalls += bestN
				if worst == "" && float64(mine) > 2*allow+3 {
					worst = fmt.Sprintf("; from %s to %s it got %d calls to %s's %d (weight %.2f to %.2f)",
						ts(b), ts(e), mine, best, bestN, s.factor(reg, e), pw)
				}
			}
			if peerCalls < rampMinPeer {
				r.Unverified++
				continue
			}
			r.Checks++
			if limit := allowed*(1+rampSlack) + rampCalls; got > limit {
				r.Violations = append(r.Violations, Violation{Check: CheckRamp, At: reg, Consumer: gw, Service: run.Service,
					What: fmt.Sprintf("%s restarted (run from %s, registered %s) got %.0f calls through %s in the first half of its %v ramp, more than the %.0f its weight allows (limit %.0f)%s",
						run.ID, ts(run.Start), ts(reg), got, gw, s.Window, allowed, limit, worst)})
			}
		}
	}
	return r
}

// registeredAfter is the registration time of the first node of service
// and id created at or after start: the time its node says
// (registrationTimeUTC), else its creation.
func (h *History) registeredAfter(service, id string, start time.Time) (time.Time, bool) {
	for _, c := range h.Truth {
		if c.Kind != Created || c.Service != service || c.ID != id || c.At.Before(start) {
			continue
		}
		if !c.Registered.IsZero() && !c.Registered.Before(start) {
			return c.Registered, true
		}
		return c.At, true
	}
	return time.Time{}, false
}

// callsIn counts the calls through gateway sent in [from, to): those id
// served, and those each other instance served.
func (h *History) callsIn(gateway, id string, from, to time.Time) (int, map[string]int) {
	mine, peers := 0, map[string]int{}
	for _, q := range h.Requests {
		if q.Gateway != gateway || q.Failed || q.Instance == "" || q.At.Before(from) || !q.At.Before(to) {
			continue
		}
		if q.Instance == id {
			mine++
		} else {
			peers[q.Instance]++
		}
	}
	return mine, peers
}

// peerWeight is the least weight id (of service) may have had at t: its
// ramp's factor from the registration of its run alive at t, 1 when no
// run of it is known (skip is the checked run's index).
func (h *History) peerWeight(s *SlowStart, service, id string, t time.Time, skip int) float64 {
	for i := len(h.Runs) - 1; i >= 0; i-- {
		run := h.Runs[i]
		if i == skip || run.Service != service || run.ID != id || run.Start.After(t) {
			continue
		}
		reg, ok := h.registeredAfter(service, id, run.Start)
		if !ok || reg.After(t) {
			return s.MinWeight
		}
		return s.factor(reg, t)
	}
	return s.MinWeight
}
