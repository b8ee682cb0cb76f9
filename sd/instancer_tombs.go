package sd

import (
	"fmt"
	"time"
)

type tomb struct {
	czxid   int64
	version int32 // the node's data version when evicted
	until   time.Time
}

// EvictResult says what EvictRegistration did.
type EvictResult int

// EvictRegistration results.
const (
	// Evicted: the registration left the published set.
	Evicted EvictResult = iota
	// NotListed: the Instancer lists no instance with that id; nothing changed.
	NotListed
	// OtherRegistration: the id is listed, but by another registration
	// (another creation zxid, typically a restart); nothing changed.
	OtherRegistration
)

func (r EvictResult) String() string {
	switch r {
	case Evicted:
		return "evicted"
	case NotListed:
		return "not listed"
	case OtherRegistration:
		return "other registration"
	}
	return fmt.Sprintf("EvictResult(%d)", int(r))
}

// Evict removes the instance with this id from the published set at once
// and returns it, whatever its registration; see EvictRegistration. It
// returns false for an id the Instancer does not list.
func (in *Instancer) Evict(id string) (Instance, bool) {
	inst, res := in.EvictRegistration(id, 0)
	return inst, res == Evicted
}

// EvictRegistration removes the instance with this id from the published
// set at once, if czxid is the creation zxid of its node (0 matches any),
// and returns it. A tombstone keeps it out until ZooKeeper shows its node
// gone, re-created with a newer creation zxid, or written again (a newer
// data version: an instance that left rotation and came back, say), or the
// tombstone TTL passes (DefaultTombstoneTTL), whichever comes first. An
// id the Instancer does not list, or lists from another
// registration, changes nothing: an eviction can only ever end the
// registration it names.
func (in *Instancer) EvictRegistration(id string, czxid int64) (Instance, EvictResult) {
	in.mu.Lock()
	defer in.mu.Unlock()
	res := NotListed
	for _, e := range in.entries {
		if !e.ok || e.inst.ID != id {
			continue
		}
		if czxid != 0 && e.inst.Czxid != czxid {
			res = OtherRegistration
			continue
		}
		in.tombs[id] = tomb{czxid: e.inst.Czxid, version: e.inst.Version, until: time.Now().Add(in.opts.tombTTL)}
		if in.opts.metrics.Evictions != nil {
			in.opts.metrics.Evictions.Add(1)
		}
		in.logger.Info("evicted", "instance", id, "czxid", e.inst.Czxid)
		in.publishLocked()
		in.armTombTimerLocked()
		return e.inst.clone(), Evicted
	}
	return Instance{}, res
}

// armTombTimerLocked sets the timer that lifts the earliest tombstone when
// its TTL passes, so an instance does not wait for an unrelated change to
// come back. in.mu must be held.
func (in *Instancer) armTombTimerLocked() {
	var next time.Time
	for _, t := range in.tombs {
		if next.IsZero() || t.until.Before(next) {
			next = t.until
		}
	}
	switch {
	case next.IsZero():
		if in.tombTimer != nil {
			in.tombTimer.Stop()
		}
	case in.tombTimer == nil:
		in.tombTimer = time.AfterFunc(time.Until(next), in.expireTombs)
	default:
		in.tombTimer.Reset(time.Until(next))
	}
}

func (in *Instancer) expireTombs() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.ctx.Err() != nil {
		return
	}
	in.publishLocked() // drops the expired tombstones
	in.armTombTimerLocked()
}
