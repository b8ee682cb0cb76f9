package history

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// stream is one consumer's publishes of one service, in order.
type stream struct {
	consumer, service string
	pubs              []Publish
}

func streams(h *History) []*stream {
	m := map[[2]string]*stream{}
	for _, p := range h.Publishes {
		k := [2]string{p.Consumer, p.Service}
		if m[k] == nil {
			m[k] = &stream{consumer: p.Consumer, service: p.Service}
		}
		m[k].pubs = append(m[k].pubs, p)
	}
	out := make([]*stream, 0, len(m))
	for _, s := range m {
		slices.SortStableFunc(s.pubs, func(a, b Publish) int { return a.At.Compare(b.At) })
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *stream) int {
		return cmp.Or(cmp.Compare(a.consumer, b.consumer), cmp.Compare(a.service, b.service))
	})
	return out
}

// at is the last publish at or before t; nil before the first.
func (s *stream) at(t time.Time) *Publish {
	i, _ := slices.BinarySearchFunc(s.pubs, t, func(p Publish, t time.Time) int {
		if p.At.After(t) {
			return 1
		}
		return -1
	})
	if i == 0 {
		return nil
	}
	return &s.pubs[i-1]
}

func ts(t time.Time) string { return t.Format("15:04:05.000") }

func set(addrs []string) string { return "{" + strings.Join(addrs, ",") + "}" }

// Convergence checks that after each heal every consumer shows, without an
// error, a set ZooKeeper held since the heal, within b.Converge.
func Convergence(h *History, t *Truth, b Bounds) Report {
	var r Report
	for _, heal := range h.Heals {
		deadline := heal.At.Add(b.Converge)
		for _, s := range streams(h) {
			if deadline.After(h.End) {
				r.Unverified++
				continue
			}
			r.Checks++
			// The consumer's set changes only at its publishes, and
			// ZooKeeper's at its changes: try the heal and each of both.
			cands := []time.Time{heal.At}
			for _, p := range s.pubs {
				if p.At.After(heal.At) && !p.At.After(deadline) {
					cands = append(cands, p.At)
				}
			}
			for _, st := range t.States(s.service) {
				if st.At.After(heal.At) && !st.At.After(deadline) {
					cands = append(cands, st.At)
				}
			}
			if at, ok := converged(s, t, heal.At, cands, b.Skew); ok {
				if took := at.Sub(heal.At); took > r.Slowest {
					r.Slowest, r.SlowestBy = took, s.consumer+" "+s.service
				}
				continue
			}
			have, why := "nothing", ""
			var got []string
			if p := s.at(deadline); p != nil {
				got = addrsOf(p.Members)
				have = set(got)
				if p.Err != "" {
					why = " (with error: " + p.Err + ")"
				}
			}
			want := t.UpAt(s.service, deadline)
			d := diff(got, want)
			if d == "" {
				d = "the same set, not believed"
			}
			r.Violations = append(r.Violations, Violation{Check: CheckConvergence, At: deadline, Consumer: s.consumer, Service: s.service,
				What: fmt.Sprintf("not converged %v after the heal at %s (%s): publishes %s%s, ZooKeeper has %s (%s)",
					b.Converge, ts(heal.At), heal.What, have, why, set(want), d)})
		}
	}
	return r
}

// converged tells whether at one of cands the consumer's set, without an
// error, equals one ZooKeeper held between heal and then (plus skew), and
// the first such time.
func converged(s *stream, t *Truth, heal time.Time, cands []time.Time, skew time.Duration) (time.Time, bool) {
	slices.SortFunc(cands, time.Time.Compare)
	for _, c := range cands {
		p := s.at(c)
		if p == nil || p.Err != "" {
			continue
		}
		got := addrsOf(p.Members)
		if slices.Equal(got, t.UpAt(s.service, heal)) {
			return c, true
		}
		for _, st := range t.States(s.service) {
			if st.At.After(heal) && !st.At.After(c.Add(skew)) && slices.Equal(got, st.Addrs) {
				return c, true
			}
		}
	}
	return time.Time{}, false
}

// PhantomsAndResurrections checks every instance of every set published
// without an error: it was UP in ZooKeeper within b.Converge before (or
// b.Skew after). One that was deleted before that is a resurrection; one
// that never was, or was out of service all that time, a phantom.
func PhantomsAndResurrections(h *History, t *Truth, b Bounds) Report {
	var r Report
	for _, p := range h.Publishes {
		if p.Err != "" {
			continue // the last good set, kept on purpose while disconnected
		}
		from, to := p.At.Add(-b.Converge), p.At.Add(b.Skew)
		for _, m := range p.Members {
			regs := t.match(p.Service, m)
			if slices.ContainsFunc(regs, func(g *Registration) bool { return g.UpWithin(from, to) }) {
				r.Checks++
				continue
			}
			if t.blind(from, to) {
				r.Unverified++
				continue
			}
			r.Checks++
			v := Violation{At: p.At, Consumer: p.Consumer, Service: p.Service}
			name := m.Addr
			if m.Czxid != 0 {
				name = fmt.Sprintf("%s (czxid %d)", m.Addr, m.Czxid)
			}
			var deleted *Registration
			for _, g := range regs {
				if !g.Deleted.IsZero() && g.Deleted.Before(from) && (deleted == nil || g.Deleted.After(deleted.Deleted)) {
					deleted = g
				}
			}
			switch {
			case deleted != nil:
				v.Check = CheckResurrection
				v.What = fmt.Sprintf("published %s, registration %s czxid %d deleted at %s, %v before",
					name, deleted.Key.Path, deleted.Key.Czxid, ts(deleted.Deleted), p.At.Sub(deleted.Deleted).Round(time.Millisecond))
			case len(regs) == 0:
				v.Check = CheckPhantom
				v.What = fmt.Sprintf("published %s, which ZooKeeper never held", name)
			default:
				g := regs[len(regs)-1]
				v.Check = CheckPhantom
				if up := g.lastUp(); !up.IsZero() {
					v.What = fmt.Sprintf("published %s, out of service in ZooKeeper since %s", name, ts(up))
				} else {
					v.What = fmt.Sprintf("published %s, not UP in ZooKeeper within %v before (registered at %s)", name, b.Converge, ts(g.Created))
				}
			}
			r.Violations = append(r.Violations, v)
		}
	}
	return r
}

// GoingBack checks that no consumer publishes a set older than one it
// published before. A set's versions are the indexes of ZooKeeper's sets
// (of that service) equal to it, or that it is on the way to from the set
// before (one read's changes in some order), up to its time plus b.Skew;
// a set whose newest version is older than the oldest version of an
// earlier one went back. A set equal to one of ZooKeeper's less
// instances whose deletion the recorder saw after it, up to the
// publication plus b.Skew, is that set's version too: a deletion carries
// no time (no mtime, and its notification no zxid), so the recorder dates
// it by when it saw it, and a consumer that saw it first is ahead, not
// behind (seed 7087582546183187199); one it saw just after a truth gap
// may have happened from the gap's start on (Truth.deletedFrom). Sets
// matching none of ZooKeeper's are not compared, nor sets published while
// the recorder was blind (Unverified).
func GoingBack(h *History, t *Truth, b Bounds) Report {
	var r Report
	for _, s := range streams(h) {
		states := t.States(s.service)
		floor, floorAt, floorSet := -2, time.Time{}, []string(nil)
		for _, p := range s.pubs {
			got := addrsOf(p.Members)
			if t.blind(p.At.Add(-b.Skew), p.At.Add(b.Skew)) {
				// The truth may lack the set it shows: a change and its
				// undoing both inside the gap (seed 5810577760562063218:
				// a drain undone 12 ms later, read by the recorder only
				// undone, published by the consumers both ways).
				r.Unverified++
				continue
			}
			var cands []int // the versions it may be, oldest first
			if len(got) == 0 {
				cands = append(cands, -1) // the empty service before its first instance
			}
			var prev []string
			for i, st := range states {
				if st.At.After(p.At.Add(b.Skew)) {
					break
				}
				switch {
				case slices.Equal(st.Addrs, got):
					cands = append(cands, i)
				case !slices.Equal(prev, got) && between(prev, st.Addrs, got):
					// A set on the way from the one before: the
					// changes of one read came in an unknown order.
					// It is as new as that read, even when a later
					// set equals it.
					cands = append(cands, i)
				case t.deletedSoonAfter(s.service, st, got, p.At.Add(b.Skew), b.Skew):
					cands = append(cands, i)
				}
				prev = st.Addrs
			}
			if len(cands) == 0 {
				continue
			}
			r.Checks++
			hi := cands[len(cands)-1]
			if hi < floor {
				was := "the empty set"
				if floor >= 0 {
					was = set(floorSet) + " (ZooKeeper's from " + ts(states[floor].At) + ")"
				}
				r.Violations = append(r.Violations, Violation{Check: CheckGoingBack, At: p.At, Consumer: s.consumer, Service: s.service,
					What: fmt.Sprintf("published %s, ZooKeeper's set until %s at the newest, after publishing %s at %s",
						set(got), ts(endOf(states, hi)), was, ts(floorAt))})
				continue
			}
			// Its oldest version at or above the floor: the consumer has
			// not gone back so far, so an older one it equals is not the
			// one it publishes.
			lo := hi
			for _, c := range cands {
				if c >= floor {
					lo = c
					break
				}
			}
			if lo > floor {
				floor, floorAt, floorSet = lo, p.At, got
			}
		}
	}
	return r
}

// endOf is when state i ended.
func endOf(states []State, i int) time.Time {
	if i+1 < len(states) {
		return states[i+1].At
	}
	return time.Time{}
}

// Reregistration checks that a registration deleted while its instance
// ran (a session expiry) was made again, by a newer node at its path,
// within the session timeout plus b.Reregister of its deletion, or of the
// end of a fault that kept the instance from ZooKeeper then.
func Reregistration(h *History, t *Truth, b Bounds) Report {
	var r Report
	regs := t.Registrations()
	for _, g := range regs {
		if g.Deleted.IsZero() {
			continue
		}
		run := runAt(h.Runs, g.Key.Path, g.Deleted)
		if run == nil {
			continue // it was stopping, or was never the driver's
		}
		from := g.Deleted
		for _, bl := range h.Blinds {
			if (bl.Target == run.ID || bl.Target == "*") && !bl.From.After(from) && bl.To.After(from) {
				from = bl.To
			}
		}
		deadline := from.Add(h.SessionTimeout + b.Reregister)
		again := slices.ContainsFunc(regs, func(n *Registration) bool {
			return n.Key.Path == g.Key.Path && n.Key.Czxid > g.Key.Czxid && !n.Created.After(deadline)
		})
		switch {
		case again:
			r.Checks++
		case deadline.After(h.End), !run.Stopping.IsZero() && run.Stopping.Before(deadline):
			r.Unverified++ // it was not given the time
		default:
			r.Checks++
			r.Violations = append(r.Violations, Violation{Check: CheckReregistration, At: deadline, Service: g.Service,
				What: fmt.Sprintf("%s (czxid %d) deleted at %s while %s ran; not registered again by %s (session timeout %v + %v)",
					g.Key.Path, g.Key.Czxid, ts(g.Deleted), run.ID, ts(deadline), h.SessionTimeout, b.Reregister)})
		}
	}
	return r
}

// runAt is the run of path alive at t, not stopping: the latest started.
func runAt(runs []Run, path string, t time.Time) *Run {
	var out *Run
	for i := range runs {
		rn := &runs[i]
		if rn.Path != path || rn.Start.After(t) || (!rn.Stopping.IsZero() && !rn.Stopping.After(t)) {
			continue
		}
		if out == nil || rn.Start.After(out.Start) {
			out = rn
		}
	}
	return out
}

// IsCrash tells whether a failed request is a crash's: in flight on the
// killed provider (its error names the address) when it was killed, or
// sent before it died; through a gateway that retries nothing, any that
// failed there once it was killed.
func IsCrash(q Request, crashes []Crash) bool {
	if !q.Failed {
		return false
	}
	for _, c := range crashes {
		if !q.Done.After(c.KillAt) || !strings.Contains(q.Reason, c.Addr) {
			continue
		}
		dead := c.DeadAt
		if dead.Before(c.KillAt) {
			dead = c.KillAt
		}
		if q.NoRetry || (q.Post && !q.At.After(dead)) {
			return true
		}
	}
	return false
}

// Requests checks the load: no request failed outside a crash, no order
// was executed twice, and every order answered OK was executed (when the
// providers kept ledgers: Executions not nil).
func Requests(h *History) Report {
	r := Report{Requests: len(h.Requests)}
	type agg struct {
		n     int
		first time.Time
	}
	failed, dup, lost := map[string]*agg{}, map[string]*agg{}, map[string]*agg{}
	note := func(m map[string]*agg, k string, at time.Time) {
		if m[k] == nil {
			m[k] = &agg{first: at}
		}
		m[k].n++
	}
	for _, q := range h.Requests {
		r.Checks++
		if q.Failed && !IsCrash(q, h.Crashes) && h.restoring(q.At) {
			r.RestoreFailed++
		} else if q.Failed && !IsCrash(q, h.Crashes) {
			r.Failed++
			note(failed, q.Gateway+"\x00"+q.Reason, q.At)
		}
		if q.Post && q.Key != "" && h.Executions != nil {
			switch n := h.Executions[q.Key]; {
			case n > 1:
				r.Duplicated++
				note(dup, q.Gateway, q.At)
			case n == 0 && !q.Failed:
				note(lost, q.Gateway, q.At)
			}
		}
	}
	add := func(m map[string]*agg, what func(k string, a *agg) (string, string)) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			gw, w := what(k, m[k])
			r.Violations = append(r.Violations, Violation{Check: CheckRequests, At: m[k].first, Consumer: gw, What: w})
		}
	}
	add(failed, func(k string, a *agg) (string, string) {
		gw, reason, _ := strings.Cut(k, "\x00")
		return gw, fmt.Sprintf("%d requests failed outside a crash, the first at %s: %s", a.n, ts(a.first), reason)
	})
	add(dup, func(k string, a *agg) (string, string) {
		return k, fmt.Sprintf("%d orders executed more than once, the first sent at %s", a.n, ts(a.first))
	})
	add(lost, func(k string, a *agg) (string, string) {
		return k, fmt.Sprintf("%d orders answered OK that no provider executed, the first sent at %s", a.n, ts(a.first))
	})
	return r
}

// between tells whether x can be a set on the way from a to b, the
// changes between them made in some order: it holds what both hold, and
// nothing neither holds.
func between(a, b, x []string) bool {
	for _, v := range a {
		if slices.Contains(b, v) && !slices.Contains(x, v) {
			return false
		}
	}
	for _, v := range x {
		if !slices.Contains(a, v) && !slices.Contains(b, v) {
			return false
		}
	}
	return true
}
