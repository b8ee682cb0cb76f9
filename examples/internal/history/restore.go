package history

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// CheckRestored is the name of Restored's violations.
const CheckRestored = "restored"

// Restore is the whole ensemble stopped at From and started again from an
// older copy of its data (Kind "snapshot") or from none ("empty"),
// serving again at To. zxids go back: a session that saw more than the
// restored servers hold is refused by every one of them, and must be
// given up for a new one (sd/lost.go).
type Restore struct {
	Kind string    `json:"kind"`
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// RestoreBound is how long after a restore's end a live provider may take
// to be registered again: a session timeout to call its session lost (or,
// from an older copy, for the copy's session to expire and free its
// path), then as long as a re-registration after an expiry.
func RestoreBound(h *History, b Bounds) time.Duration { return h.SessionTimeout + b.Reregister }

// Restored checks a restore: by RestoreBound after it ended, every run
// live through it is registered (its node present and UP in ZooKeeper)
// and stays so until the run's end; by Converge after that, every
// consumer publishes, without an error, the service's UP set as ZooKeeper
// holds it. Nothing else happens after a restore: the schedule ends with
// it.
func Restored(h *History, b Bounds) Report {
	var r Report
	rs := h.Restore
	if rs == nil {
		return r
	}
	reg := rs.To.Add(RestoreBound(h, b))
	conv := reg.Add(b.Converge)
	if conv.After(h.End) {
		r.Unverified++
		return r
	}
	for _, run := range h.Runs {
		if !run.Start.Before(rs.From) || !run.Stopping.IsZero() && run.Stopping.Before(conv) {
			continue
		}
		r.Checks++
		if ok, what := h.heldFrom(run.Path, reg); !ok {
			r.Violations = append(r.Violations, Violation{Check: CheckRestored, At: reg, Service: run.Service,
				What: fmt.Sprintf("%s, live through the %s restore (%s to %s), is not registered and UP %v after it: %s",
					run.ID, rs.Kind, ts(rs.From), ts(rs.To), RestoreBound(h, b), what)})
		}
	}
	type key struct{ consumer, service string }
	last := map[key]Publish{}
	for _, p := range h.Publishes {
		if !p.At.After(conv) {
			last[key{p.Consumer, p.Service}] = p
		}
	}
	keys := slices.SortedFunc(func(yield func(key) bool) {
		for k := range last {
			if !yield(k) {
				return
			}
		}
	}, func(a, b key) int { return strings.Compare(a.consumer+"\x00"+a.service, b.consumer+"\x00"+b.service) })
	for _, k := range keys {
		p := last[k]
		r.Checks++
		want := h.upAddrs(k.service, conv)
		var got []string
		for _, m := range p.Members {
			got = append(got, m.Addr)
		}
		slices.Sort(got)
		if p.Err != "" || !slices.Equal(got, want) {
			r.Violations = append(r.Violations, Violation{Check: CheckRestored, At: conv, Consumer: k.consumer, Service: k.service,
				What: fmt.Sprintf("%v after the %s restore ended (%s) it publishes %v (since %s, err %q), ZooKeeper holds %v UP",
					conv.Sub(rs.To), rs.Kind, ts(rs.To), got, ts(p.At), p.Err, want)})
		}
	}
	return r
}

// restoring tells whether t is within a restore or the bound after it:
// after an empty restore ZooKeeper lists no instance until the providers
// registered again, and a consumer publishes what it reads (a live read
// wins over the last set), so a call may find no endpoint. Such failures
// are counted apart (Report.RestoreFailed), not as violations. The bound
// is RestoreBound with DefaultBounds' reregistration, the longest a run
// holds itself to.
func (h *History) restoring(t time.Time) bool {
	rs := h.Restore
	return rs != nil && !t.Before(rs.From) && !t.After(rs.To.Add(RestoreBound(h, DefaultBounds)))
}

// heldFrom tells whether the truth shows a node at path, UP, from t until
// the history's end.
func (h *History) heldFrom(path string, t time.Time) (bool, string) {
	var at *Change
	for i := range h.Truth {
		c := &h.Truth[i]
		if c.Key.Path != path {
			continue
		}
		if !c.At.After(t) {
			at = c
			continue
		}
		if c.Kind == Deleted || !c.Up {
			return false, fmt.Sprintf("%s at %s", c.Kind, ts(c.At))
		}
	}
	switch {
	case at == nil:
		return false, "no node"
	case at.Kind == Deleted:
		return false, "deleted at " + ts(at.At)
	case !at.Up:
		return false, "not UP since " + ts(at.At)
	}
	return true, ""
}

// upAddrs are the addresses of service's UP nodes at t, sorted.
func (h *History) upAddrs(service string, t time.Time) []string {
	latest := map[string]Change{}
	for _, c := range h.Truth {
		if c.Service == service && !c.At.After(t) {
			latest[c.Key.Path] = c
		}
	}
	var out []string
	for _, c := range latest {
		if c.Kind != Deleted && c.Up {
			out = append(out, c.Addr)
		}
	}
	slices.Sort(out)
	return out
}

// before is h as it was before t, for the validators that read zxids and
// orders across the history: a restore sends zxids back, so they stop at
// it and Restored checks what comes after.
func (h *History) before(t time.Time) *History {
	cut := *h
	cut.End = t
	cut.Restore = nil
	keep := func(at time.Time) bool { return at.Before(t) }
	cut.Truth = slices.DeleteFunc(slices.Clone(h.Truth), func(c Change) bool { return !keep(c.At) })
	cut.Gaps = slices.DeleteFunc(slices.Clone(h.Gaps), func(g Gap) bool { return !keep(g.From) })
	cut.Publishes = slices.DeleteFunc(slices.Clone(h.Publishes), func(p Publish) bool { return !keep(p.At) })
	cut.Heals = slices.DeleteFunc(slices.Clone(h.Heals), func(x Heal) bool { return !keep(x.At) })
	cut.Blinds = slices.DeleteFunc(slices.Clone(h.Blinds), func(x Blind) bool { return !keep(x.From) })
	cut.Requests = slices.DeleteFunc(slices.Clone(h.Requests), func(q Request) bool { return !keep(q.At) })
	cut.Crashes = slices.DeleteFunc(slices.Clone(h.Crashes), func(x Crash) bool { return !keep(x.KillAt) })
	cut.Stops = slices.DeleteFunc(slices.Clone(h.Stops), func(x Stop) bool { return !keep(x.Signal) })
	cut.Writes = slices.DeleteFunc(slices.Clone(h.Writes), func(x Written) bool { return !keep(x.Sent) })
	cut.Guards = slices.DeleteFunc(slices.Clone(h.Guards), func(x Guard) bool { return !keep(x.From) })
	cut.Sick = slices.DeleteFunc(slices.Clone(h.Sick), func(x Sick) bool { return !keep(x.From) })
	cut.Ready = slices.DeleteFunc(slices.Clone(h.Ready), func(x ReadySample) bool { return !keep(x.At) })
	cut.Runs = slices.DeleteFunc(slices.Clone(h.Runs), func(x Run) bool { return !keep(x.Start) })
	for i := range cut.Runs {
		if !keep(cut.Runs[i].Stopping) {
			cut.Runs[i].Stopping, cut.Runs[i].How = time.Time{}, "" // alive at the cut
		}
	}
	return &cut
}
