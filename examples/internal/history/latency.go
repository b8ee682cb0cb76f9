package history

import (
	"fmt"
	"slices"
	"strings"
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

// Agree checks that in each round every connected consumer of a service
// comes to the same set as the others: at some time between a heal and
// b.Converge after it, every consumer that a fault did not keep from
// ZooKeeper shows one set without an error. (The next round's faults may
// begin within that time, so the set is not sampled at one instant.)
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
		end := heal.At.Add(b.Converge)
		if end.After(h.End) {
			r.Unverified++
			continue
		}
		for _, svc := range svcs {
			var ss []*stream
			cands := []time.Time{heal.At}
			for _, s := range byService[svc] {
				if gatewayBlind(h.Blinds, s.consumer, heal.At, end) {
					continue
				}
				ss = append(ss, s)
				for _, p := range s.pubs {
					if p.At.After(heal.At) && !p.At.After(end) {
						cands = append(cands, p.At)
					}
				}
			}
			if len(ss) < 2 {
				continue
			}
			r.Checks++
			if slices.ContainsFunc(cands, func(c time.Time) bool { return agreeAt(ss, c) }) {
				continue
			}
			var parts []string
			for _, s := range ss {
				shows := "nothing"
				if p := s.at(end); p != nil {
					shows = set(addrsOf(p.Members))
					if p.Err != "" {
						shows += " (with error)"
					}
				}
				parts = append(parts, s.consumer+" "+shows)
			}
			r.Violations = append(r.Violations, Violation{Check: CheckAgree, At: end, Service: svc,
				What: fmt.Sprintf("the consumers never showed one set in the %v after the heal at %s; at the end: %s", b.Converge, ts(heal.At), strings.Join(parts, ", "))})
		}
	}
	return r
}

// agreeAt tells whether every stream shows one set, without an error, at c.
func agreeAt(ss []*stream, c time.Time) bool {
	var first []string
	for i, s := range ss {
		p := s.at(c)
		if p == nil || p.Err != "" {
			return false
		}
		got := addrsOf(p.Members)
		if i == 0 {
			first = got
		} else if !slices.Equal(first, got) {
			return false
		}
	}
	return true
}
