package sd

import (
	"context"
	"fmt"
	"path"
	"slices"
	"time"
)

// This file lets an Instancer start from a set kept from an earlier run
// (a snapshot on disk, see package consumer) when ZooKeeper does not answer
// its first load in time, and hands out the set it publishes for such a
// snapshot to be written. A live read always wins: the first set read from
// ZooKeeper replaces the fallback's, and nothing ever replaces a set read
// from ZooKeeper with a fallback.

// View names what an Instancer reads: the ensemble, the chroot, the base
// path, the service and the layout. A set kept from one View is only ever
// published by an Instancer of the same View.
type View struct {
	Servers  []string // the ensemble's servers as host:port, sorted
	Chroot   string   // "" for none
	BasePath string
	Service  string
	Layout   string // the Codec's type (LayoutOf)
}

// Equal reports whether v and w name the same thing.
func (v View) Equal(w View) bool {
	return slices.Equal(v.Servers, w.Servers) && v.Chroot == w.Chroot && v.BasePath == w.BasePath &&
		v.Service == w.Service && v.Layout == w.Layout
}

// LayoutOf names the layout a Codec reads, by its type: "sd.CuratorCodec",
// "sd.PlainCodec", "sd.MixedCodec"...
func LayoutOf(c Codec) string { return fmt.Sprintf("%T", c) }

// View is what the Instancer reads.
func (in *Instancer) View() View {
	servers := slices.Clone(in.c.servers)
	slices.Sort(servers)
	return View{Servers: servers, Chroot: in.c.chroot, BasePath: in.opts.basePath, Service: in.service, Layout: LayoutOf(in.opts.codec)}
}

// PublishedSet is the set an Instancer published, as LiveSet hands it out
// and as NewInstancerFallback publishes it again: each instance's record
// with what its node said of it (Path, Czxid, Version), enough to publish
// the same strings and to describe the same registrations to Endpointers.
type PublishedSet struct {
	View View
	// Instances are the instances published, in the published order.
	Instances []Instance
	// Zxid is a zxid the set was read at or after; 0 when unknown. It is a
	// record only: a set kept from an earlier run never fences a read
	// (an ensemble rebuilt from scratch starts from zxid 0 again).
	Zxid int64
	// ReadAt is the last time the set was known to be ZooKeeper's: when
	// LiveSet returned it.
	ReadAt time.Time
}

// LiveSet returns the set the Instancer publishes, false unless it is
// ZooKeeper's now: read without error, watched since, and not a fallback.
// The records are copies.
func (in *Instancer) LiveSet() (PublishedSet, bool) {
	v := in.View()
	in.mu.Lock()
	defer in.mu.Unlock()
	select {
	case <-in.loaded:
	default:
		return PublishedSet{}, false
	}
	if in.pubErr != nil || in.ctx.Err() != nil {
		return PublishedSet{}, false
	}
	insts := make([]Instance, len(in.pubInst))
	for i, inst := range in.pubInst {
		insts[i] = inst.clone()
		insts[i].raw = nil
	}
	return PublishedSet{View: v, Instances: insts, Zxid: max(in.readZxid, in.c.zxid.Load()), ReadAt: time.Now()}, true
}

// Fallback is what NewInstancerFallback publishes when the first load does
// not succeed in time.
type Fallback struct {
	// After bounds the wait for the first load; the connect timeout does
	// too, when no server of the ensemble gave a session within it.
	After time.Duration
	// Load returns the set to publish for the Instancer's View, false for
	// none. It is called at most once, when the wait is over and nothing
	// was read from ZooKeeper, from the goroutine that called
	// NewInstancerFallback. A set of another View is not published.
	Load func(v View) (PublishedSet, bool)
}

// fallbackState is what an Instancer knows of the fallback it published.
type fallbackState struct {
	used   bool      // the fallback's set was published
	readAt time.Time // its ReadAt
}

// NewInstancerFallback is NewInstancerContext that does not fail when the
// first load has not succeeded within fb.After (or no server gave a
// session within the connect timeout): it then publishes the set fb.Load
// returns, marked stale (Stale), and returns the Instancer, which keeps
// trying. Without a set from fb.Load it goes on as NewInstancerContext:
// it waits for the first load until ctx ends, the Client closes or no
// server gave a session within the connect timeout, and then returns the
// error.
//
// While the Instancer serves the fallback's set, its events carry no
// error (go-kit's subscribers use only the instances of an event without
// one), Err says the service was not read yet (ErrNotLoaded, or the read's
// error), and LiveSet returns false. The first set read from ZooKeeper
// replaces it at once, whatever it holds (an instance gone during the
// outage leaves then); Evict works on the fallback's set as on a read one.
func NewInstancerFallback(ctx context.Context, c *Client, service string, fb Fallback, opts ...InstancerOption) (*Instancer, error) {
	if fb.After <= 0 {
		return nil, &ConfigError{"fallback wait", fb.After.String(), "must be positive"}
	}
	if fb.Load == nil {
		return nil, &ConfigError{"fallback load", "nil", "a func returning the set to publish"}
	}
	in, err := newInstancer(c, service, opts)
	if err != nil {
		return nil, err
	}
	after := time.NewTimer(fb.After)
	defer after.Stop()
	never := time.NewTimer(c.opts.connectTimeout)
	defer never.Stop()
	tried := false
	fallBack := func() bool {
		if tried {
			return false
		}
		tried = true
		return in.fallBack(fb.Load)
	}
	var noServer error
	for waiting := true; waiting; {
		select {
		case <-in.loaded:
			return in, nil
		case <-ctx.Done():
			waiting = false
		case <-c.Done():
			waiting = false
		case <-after.C:
			if fallBack() {
				return in, nil
			}
		case <-never.C:
			if !c.hadSession() {
				if fallBack() {
					return in, nil
				}
				noServer = c.errNoServer()
				waiting = false
			}
		}
	}
	return nil, in.firstLoadFailed(ctx, service, noServer)
}

// fallBack publishes the set load returns, unless something was read from
// ZooKeeper meanwhile, and tells whether it did. A load that completed
// before it, or one that stored part of a set (entries), wins.
func (in *Instancer) fallBack(load func(View) (PublishedSet, bool)) bool {
	if in.readAny() {
		return false
	}
	v := in.View()
	set, ok := load(v)
	if !ok {
		return false
	}
	if !set.View.Equal(v) {
		in.logger.Warn("not publishing a fallback set of another view", "want", v, "got", set.View)
		return false
	}
	entries := make(map[string]*entry, len(set.Instances))
	for _, inst := range set.Instances {
		node := path.Base(inst.Path)
		if inst.Path == "" || !ValidNodeName(node) {
			in.logger.Warn("not publishing a fallback set: an instance without its node's path", "instance", inst.ID)
			return false
		}
		inst = inst.clone()
		inst.raw = nil
		inst.Name = in.service
		inst.Path = in.dir + "/" + node
		// version -1: no read ever finds the entry unchanged, so every
		// read replaces it; the instance keeps its node's version, which
		// a tombstone (Evict) compares with the node read later.
		e := &entry{inst: inst, ok: true, czxid: inst.Czxid, version: -1, out: inst.Status() == StatusOutOfService}
		e.setPub(in.render(inst))
		entries[node] = e
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.readAnyLocked() || in.ctx.Err() != nil {
		return false
	}
	in.entries = entries
	in.fallback = fallbackState{used: true, readAt: set.ReadAt}
	in.publishLocked()
	return true
}

// readAny tells whether anything was read from ZooKeeper.
func (in *Instancer) readAny() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.readAnyLocked()
}

// readAnyLocked: in.mu must be held. A stored entry or unreadable child
// was read, or at least listed.
func (in *Instancer) readAnyLocked() bool {
	select {
	case <-in.loaded:
		return true
	default:
	}
	return len(in.entries) > 0 || len(in.unread) > 0
}

// Stale tells whether the Instancer publishes a fallback's set
// (NewInstancerFallback), not one read from ZooKeeper, and when that set
// was last known to be ZooKeeper's (its ReadAt). It is false from the
// first successful read on.
func (in *Instancer) Stale() (readAt time.Time, stale bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.staleLocked() {
		return time.Time{}, false
	}
	return in.fallback.readAt, true
}

// staleLocked: in.mu must be held.
func (in *Instancer) staleLocked() bool {
	if !in.fallback.used {
		return false
	}
	select {
	case <-in.loaded:
		return false
	default:
		return true
	}
}

// Loaded is closed once a set was read from ZooKeeper without error.
func (in *Instancer) Loaded() <-chan struct{} { return in.loaded }
