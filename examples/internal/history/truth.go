package history

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// Truth is the registry's truth rebuilt from a history's changes: every
// registration's life, and each service's set of UP instances after each
// change.
type Truth struct {
	regs    map[Key]*Registration
	byCzxid map[int64]*Registration
	byAddr  map[string]map[string][]*Registration // service -> addr
	states  map[string][]State                    // service -> sets in order
	gaps    []Gap
}

// Registration is one node's life.
type Registration struct {
	Key     Key
	Service string
	ID      string
	Addr    string
	Created time.Time
	Deleted time.Time // zero: there at the end
	ups     []span    // when its status was UP
	drains  []span    // when an operator's drain was on it
}

type span struct{ from, to time.Time } // to zero: open

// State is a service's set of UP addresses from At on.
type State struct {
	At    time.Time
	Addrs []string // sorted
}

// NewTruth rebuilds the truth from h.Truth.
func NewTruth(h *History) *Truth {
	t := &Truth{regs: map[Key]*Registration{}, byCzxid: map[int64]*Registration{},
		byAddr: map[string]map[string][]*Registration{}, states: map[string][]State{}, gaps: h.Gaps}
	changes := slices.Clone(h.Truth)
	slices.SortStableFunc(changes, func(a, b Change) int { return a.At.Compare(b.At) })
	up := map[string]map[string]int{} // service -> addr -> UP registrations
	// Changes the recorder saw in one read (one time) came in an order it
	// does not know (a session's ephemerals go in one transaction): a
	// service's set is noted once per read, not after each change.
	dirty := map[string]bool{}
	flush := func(at time.Time) {
		for svc := range dirty {
			ss := t.states[svc]
			now := sortedKeys(up[svc])
			if len(ss) == 0 || !slices.Equal(ss[len(ss)-1].Addrs, now) {
				t.states[svc] = append(ss, State{At: at, Addrs: now})
			}
		}
		clear(dirty)
	}
	for i, c := range changes {
		if i > 0 && !c.At.Equal(changes[i-1].At) {
			flush(changes[i-1].At)
		}
		r := t.regs[c.Key]
		if r == nil {
			if c.Kind == Deleted {
				continue // never seen alive: nothing to end
			}
			r = &Registration{Key: c.Key, Service: c.Service, ID: c.ID, Addr: c.Addr, Created: c.At}
			t.regs[c.Key] = r
			t.byCzxid[c.Key.Czxid] = r
			if t.byAddr[c.Service] == nil {
				t.byAddr[c.Service] = map[string][]*Registration{}
			}
			t.byAddr[c.Service][c.Addr] = append(t.byAddr[c.Service][c.Addr], r)
		}
		wasUp := r.isUp()
		nowUp := c.Kind != Deleted && c.Up
		switch {
		case !wasUp && nowUp:
			r.ups = append(r.ups, span{from: c.At})
		case wasUp && !nowUp:
			r.ups[len(r.ups)-1].to = c.At
		}
		wasDrained, nowDrained := r.isDrained(), c.Kind != Deleted && c.Drained
		switch {
		case !wasDrained && nowDrained:
			r.drains = append(r.drains, span{from: c.At})
		case wasDrained && !nowDrained:
			r.drains[len(r.drains)-1].to = c.At
		}
		if c.Kind == Deleted {
			r.Deleted = c.At
		}
		if wasUp != nowUp {
			if up[r.Service] == nil {
				up[r.Service] = map[string]int{}
			}
			if nowUp {
				up[r.Service][r.Addr]++
			} else if up[r.Service][r.Addr]--; up[r.Service][r.Addr] <= 0 {
				delete(up[r.Service], r.Addr)
			}
			dirty[r.Service] = true
		}
	}
	if len(changes) > 0 {
		flush(changes[len(changes)-1].At)
	}
	return t
}

func (r *Registration) isUp() bool { return len(r.ups) > 0 && r.ups[len(r.ups)-1].to.IsZero() }

func (r *Registration) isDrained() bool {
	return len(r.drains) > 0 && r.drains[len(r.drains)-1].to.IsZero()
}

// drainedAt tells whether an operator's drain was on r at t.
func (r *Registration) drainedAt(t time.Time) bool {
	for _, s := range r.drains {
		if !s.from.After(t) && (s.to.IsZero() || t.Before(s.to)) {
			return true
		}
	}
	return false
}

// UpWithin tells whether r was UP at some time in [from, to].
func (r *Registration) UpWithin(from, to time.Time) bool {
	for _, s := range r.ups {
		if !s.from.After(to) && (s.to.IsZero() || !s.to.Before(from)) {
			return true
		}
	}
	return false
}

// lastUp is when r was last UP (its last span's end; zero when open or
// never).
func (r *Registration) lastUp() time.Time {
	if len(r.ups) == 0 {
		return time.Time{}
	}
	return r.ups[len(r.ups)-1].to
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// States are service's UP sets in order.
func (t *Truth) States(service string) []State { return t.states[service] }

// UpAt is service's set of UP addresses at at.
func (t *Truth) UpAt(service string, at time.Time) []string {
	ss := t.states[service]
	i, _ := slices.BinarySearchFunc(ss, at, func(s State, at time.Time) int {
		if s.At.After(at) {
			return 1
		}
		return -1
	})
	if i == 0 {
		return nil
	}
	return ss[i-1].Addrs
}

// Registrations lists every registration, in order of creation.
func (t *Truth) Registrations() []*Registration {
	out := make([]*Registration, 0, len(t.regs))
	for _, r := range t.regs {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *Registration) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Key.Czxid, b.Key.Czxid))
	})
	return out
}

// match finds the registrations a published member may be: by czxid when
// the consumer said it, else by address within the service.
func (t *Truth) match(service string, m Member) []*Registration {
	if m.Czxid != 0 {
		if r := t.byCzxid[m.Czxid]; r != nil {
			return []*Registration{r}
		}
		return nil
	}
	return t.byAddr[service][m.Addr]
}

// blind tells whether a truth gap overlaps [from, to].
func (t *Truth) blind(from, to time.Time) bool {
	for _, g := range t.gaps {
		if !g.From.After(to) && !g.To.Before(from) {
			return true
		}
	}
	return false
}

// addrsOf is a published set's addresses, sorted, without repeats.
func addrsOf(ms []Member) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Addr)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// diff says what a has that b lacks and the other way round.
func diff(got, want []string) string {
	var extra, missing []string
	for _, a := range got {
		if !slices.Contains(want, a) {
			extra = append(extra, a)
		}
	}
	for _, b := range want {
		if !slices.Contains(got, b) {
			missing = append(missing, b)
		}
	}
	var parts []string
	if len(extra) > 0 {
		parts = append(parts, "extra "+strings.Join(extra, ","))
	}
	if len(missing) > 0 {
		parts = append(parts, "missing "+strings.Join(missing, ","))
	}
	return strings.Join(parts, "; ")
}

// deletedSoonAfter tells whether got is st's set less some of its
// instances, each with a registration deleted after st began and, at the
// earliest it may have gone (deletedFrom), by until: a set the consumer
// may have published before the recorder saw those deletions (see
// GoingBack).
func (t *Truth) deletedSoonAfter(service string, st State, got []string, until time.Time, skew time.Duration) bool {
	if len(got) >= len(st.Addrs) {
		return false
	}
	for _, a := range got {
		if !slices.Contains(st.Addrs, a) {
			return false
		}
	}
	for _, a := range st.Addrs {
		if slices.Contains(got, a) {
			continue
		}
		if !slices.ContainsFunc(t.byAddr[service][a], func(r *Registration) bool {
			return r.Deleted.After(st.At) && !t.deletedFrom(r, skew).After(until)
		}) {
			return false
		}
	}
	return true
}

// deletedFrom is the earliest r's deletion may have happened. A deletion
// has no time of its own: the recorder dates it by the read that saw it.
// One seen within skew after a truth gap ended may have happened anywhere
// in that gap, while the recorder was blind (seed 1258117544156544413: a
// session expired 0.3 s into a 2 s gap and a consumer published the
// deletion 1.7 s before the recorder's first read after it).
func (t *Truth) deletedFrom(r *Registration, skew time.Duration) time.Time {
	from := r.Deleted
	for _, g := range t.gaps {
		if g.From.Before(from) && !r.Deleted.After(g.To.Add(skew)) {
			from = g.From
		}
	}
	return from
}
