package history

import (
	"fmt"
	"slices"
	"time"
)

// CheckAgree is the name of Agree's violations.
const CheckAgree = "agree"

// Latency is how long consumers took to show each change of ZooKeeper's
// sets while nothing kept them from it: every change, not only heals.
type Latency struct {
	N        int
	P99, Max time.Duration
}

func (l Latency) String() string { return fmt.Sprintf("n=%d p99=%v max=%v", l.N, l.P99, l.Max) }

// ChangeLatency measures, for each of ZooKeeper's sets and each consumer
// of its service, the time from the set's change to the consumer's first
// publish, without an error, of that set or a later one, within
// b.Converge. Changes a truth gap or a fault on the consumer overlaps are
// left out.
func ChangeLatency(h *History, t *Truth, b Bounds) Latency {
	var ds []time.Duration
	for _, s := range streams(h) {
		states := t.States(s.service)
		for i, st := range states {
			if i == 0 {
				continue // the first load, not a change
			}
			end := st.At.Add(b.Converge)
			if end.After(h.End) || t.blind(st.At.Add(-b.Skew), end) || gatewayBlind(h.Blinds, s.consumer, st.At, end) {
				continue
			}
			for _, p := range s.pubs {
				if p.At.Before(st.At.Add(-b.Skew)) || p.Err != "" {
					continue
				}
				if p.At.After(end) {
					break
				}
				got := addrsOf(p.Members)
				if slices.ContainsFunc(states[i:], func(x State) bool { return !x.At.After(p.At.Add(b.Skew)) && slices.Equal(x.Addrs, got) }) {
					ds = append(ds, max(p.At.Sub(st.At), 0))
					break
				}
			}
		}
	}
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	return Latency{N: len(ds), P99: ds[(len(ds)*99)/100], Max: ds[len(ds)-1]}
}

// Agree checks that at the end of each round (b.Converge after each
// heal) every consumer of a service that shows a set without an error
// shows the same one.
func Agree(h *History, b Bounds) Report {
	var r Report
	byService := map[string][]*stream{}
	for _, s := range streams(h) {
		byService[s.service] = append(byService[s.service], s)
	}
	svcs := make([]string, 0, len(byService))
	for k := range byService {
		svcs = append(svcs, k)
	}
	slices.Sort(svcs)
	for _, heal := range h.Heals {
		at := heal.At.Add(b.Converge)
		if at.After(h.End) {
			r.Unverified++
			continue
		}
		for _, svc := range svcs {
			var first []string
			var firstBy string
			for _, s := range byService[svc] {
				p := s.at(at)
				if p == nil || p.Err != "" || gatewayBlind(h.Blinds, s.consumer, heal.At, at) {
					continue
				}
				got := addrsOf(p.Members)
				if firstBy == "" {
					first, firstBy = got, s.consumer
					continue
				}
				r.Checks++
				if !slices.Equal(first, got) {
					r.Violations = append(r.Violations, Violation{Check: CheckAgree, At: at, Consumer: s.consumer, Service: svc,
						What: fmt.Sprintf("at the end of the round healed at %s shows %s, %s shows %s", ts(heal.At), set(got), firstBy, set(first))})
				}
			}
		}
	}
	return r
}
