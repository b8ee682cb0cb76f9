package sd

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/go-zookeeper/zk"
)

// This file is the Instancer's ZooKeeper state machine: what the watches
// and session events ask for, and the reads that answer them.
//
// Watches are one-shot and survive reconnects within a session. Their
// events reach the Instancer through the Client's event callback, routed by
// path, so no goroutine waits on a watch: an Instancer runs one goroutine,
// plus one per registered channel, whatever the number of instances. A watch is armed only when none is
// armed on that path (the flags below), so reconnects add no watcher.

// Connection news carried by changes.conn.
const (
	connLost = 1
	connBack = 2
)

// changes is the work the run loop owes ZooKeeper's notifications.
type changes struct {
	full     bool             // every watch is lost: list and read everything
	children bool             // list the children again
	data     map[string]bool  // re-read these children
	deleted  map[string]int64 // these children are gone: name → czxid of the node the watch was on
	conn     int              // 0 no news, connLost, connBack
}

func (ch *changes) merge(o changes) {
	ch.full = ch.full || o.full
	ch.children = ch.children || o.children
	for k := range o.data {
		if ch.data == nil {
			ch.data = map[string]bool{}
		}
		ch.data[k] = true
	}
	for k, v := range o.deleted {
		if ch.deleted == nil {
			ch.deleted = map[string]int64{}
		}
		ch.deleted[k] = v
	}
	if o.conn != 0 {
		ch.conn = o.conn
	}
}

// Unreadable nodes are read again after a backoff of their own.
const (
	unreadableRetryMin = 250 * time.Millisecond
	unreadableRetryMax = 10 * time.Second
)

// unreadable is a child whose read failed for a reason of its own (an ACL
// the session lacks, typically): skipped, reported once, read again later.
type unreadable struct {
	attempts int
	due      time.Time
	err      error
}

func (in *Instancer) onSession(ev SessionEvent) {
	switch ev.State {
	case StateDisconnected:
		in.note(changes{conn: connLost})
	case StateHasSession:
		in.note(changes{conn: connBack})
	case StateExpired:
		in.note(changes{full: true})
	}
}

// onNode takes a watch event on the service node or one of its children.
// It runs on go-zookeeper's receive goroutine and must not block; in.mu is
// never held across a ZooKeeper call, so taking it here is short.
func (in *Instancer) onNode(ev zk.Event) {
	in.watchEvents.Add(1)
	if in.opts.metrics.WatchEvents != nil {
		in.opts.metrics.WatchEvents.Add(1)
	}
	if ev.Type == zk.EventNotWatching {
		// Closing: nothing to do. Expiry: the StateExpired session event
		// already asked for one full reload.
		if errors.Is(ev.Err, zk.ErrClosing) || errors.Is(ev.Err, zk.ErrSessionExpired) {
			return
		}
		in.note(changes{full: true})
		return
	}
	if ev.Path == in.dir {
		in.mu.Lock()
		switch ev.Type {
		case zk.EventNodeChildrenChanged:
			in.childWatch = false
		case zk.EventNodeCreated, zk.EventNodeDataChanged:
			in.existWatch = false
		case zk.EventNodeDeleted:
			in.childWatch, in.existWatch = false, false
		}
		in.mu.Unlock()
		in.note(changes{children: true})
		return
	}
	name := path.Base(ev.Path)
	in.mu.Lock()
	delete(in.watched, name)
	// The czxid of the node this watch was on: a deletion must not remove
	// a node re-created since, whose read may be stored after this event.
	var czxid int64
	if e, ok := in.entries[name]; ok {
		czxid = e.czxid
	}
	in.mu.Unlock()
	switch {
	case ev.Type == zk.EventNodeDeleted && czxid != 0:
		in.note(changes{deleted: map[string]int64{name: czxid}})
	case ev.Type == zk.EventNodeDeleted:
		in.note(changes{children: true}) // a node not stored yet: let the list decide
	default:
		in.note(changes{data: map[string]bool{name: true}})
	}
}

func (in *Instancer) note(c changes) {
	in.pmu.Lock()
	in.pending.merge(c)
	in.pmu.Unlock()
	in.poke()
}

func (in *Instancer) poke() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

func (in *Instancer) take() changes {
	in.pmu.Lock()
	defer in.pmu.Unlock()
	c := in.pending
	in.pending = changes{}
	return c
}

// run is the per-node feed's loop, until Stop (see feed).
func (in *Instancer) run() {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval = 50*time.Millisecond, 5*time.Second // v5 has no elapsed-time limit here: retries go on until Stop
	var work changes
	var retry, reread *time.Timer
	stopTimers := func() {
		for _, t := range []*time.Timer{retry, reread} {
			if t != nil {
				t.Stop()
			}
		}
	}
	defer stopTimers()
	for {
		var retryC, rereadC <-chan time.Time
		if retry != nil {
			retryC = retry.C
		}
		if reread != nil {
			rereadC = reread.C
		}
		select {
		case <-in.ctx.Done():
			return
		case <-in.c.Done():
			// The client is closed for good: say so once, then wait for Stop.
			in.mu.Lock()
			in.setErrLocked(ErrClosed)
			in.mu.Unlock()
			<-in.ctx.Done()
			return
		case <-in.wake:
		case <-retryC:
			retry = nil
		case <-rereadC:
			reread = nil
			work.merge(in.dueRereads())
		}
		work.merge(in.take())
		if retry != nil && work.conn != connBack {
			// Backing off after a failure; a new session retries at once.
			// Deletions and connection news do not wait.
			in.applyQuick(&work)
			continue
		}
		if retry != nil {
			retry.Stop()
			retry = nil
		}
		if err := in.apply(&work); err != nil {
			if in.ctx.Err() != nil {
				return
			}
			in.logger.Warn("reading the service failed; keeping the last set", "err", err)
			in.mu.Lock()
			in.setErrLocked(err)
			in.mu.Unlock()
			retry = time.NewTimer(bo.NextBackOff())
		} else {
			bo.Reset()
		}
		if d, ok := in.nextReread(); ok {
			if reread == nil {
				reread = time.NewTimer(d)
			} else {
				reread.Reset(d)
			}
		}
	}
}

// applyQuick applies the connection news and the deletions in w, which
// need no read.
func (in *Instancer) applyQuick(w *changes) {
	switch w.conn {
	case connLost:
		w.conn = 0
		in.mu.Lock()
		if in.firstDone {
			in.setErrLocked(ErrDisconnected)
		}
		in.mu.Unlock()
	case connBack:
		w.conn = 0
		// Watches survive a reconnect within the session; the server
		// replays what changed meanwhile. Read again only after an error,
		// which also clears it.
		in.mu.Lock()
		failed := in.pubErr != nil
		in.mu.Unlock()
		if failed {
			w.children = true
		}
	}
	if len(w.deleted) == 0 {
		return
	}
	in.mu.Lock()
	for name, czxid := range w.deleted {
		if e, ok := in.entries[name]; ok && e.czxid == czxid {
			in.forgetLocked(name, e)
		}
	}
	in.publishLocked()
	in.mu.Unlock()
	w.deleted = nil
}

// apply does the work in w against ZooKeeper. What fails stays in w.
func (in *Instancer) apply(w *changes) error {
	in.applyQuick(w)
	if !w.full && !w.children && len(w.data) == 0 {
		return nil // nothing read: a published error stands until a read succeeds
	}
	full := w.full
	var ahead *bulkSession
	if full {
		ahead = in.openBulkAhead() // its handshake overlaps the listing
		defer ahead.close()
	}
	if w.full || w.children {
		if err := in.list(w); err != nil {
			return err
		}
	}
	bulked := full && !in.opts.noBulk && len(w.data) >= bulkMin && in.bulkLoad(w, ahead)
	if len(w.data) > 0 {
		if err := in.fetch(w, bulked); err != nil {
			return err
		}
	}
	// ZooKeeper answered: the set is its own again.
	in.mu.Lock()
	in.pubErr = nil
	in.publishLocked()
	in.markLoadedLocked()
	in.mu.Unlock()
	return nil
}

// markLoadedLocked records that the published set was read from ZooKeeper.
// It does not dial the Client's own session: go-zookeeper's handshake and
// buffers would compete with the first event's delivery to the
// subscribers (0.8 ms of a 9 ms load of 1,000 nodes on two cores).
func (in *Instancer) markLoadedLocked() {
	select {
	case <-in.loaded:
	default:
		close(in.loaded)
	}
}

// forgetLocked drops everything known of child name. in.mu must be held.
func (in *Instancer) forgetLocked(name string, e *entry) {
	delete(in.entries, name)
	delete(in.unread, name)
	delete(in.watched, name)
	if e != nil && e.ok {
		delete(in.tombs, e.inst.ID)
	}
}

// list reads the children and arms the children watch (or, when the
// service node is missing, an exists watch) unless one is armed already.
// New children go to w.data.
func (in *Instancer) list(w *changes) error {
	if err := in.ctx.Err(); err != nil {
		return err
	}
	in.mu.Lock()
	if w.full {
		// A new session, or every watch lost: none is armed any more.
		in.childWatch, in.existWatch = false, false
		clear(in.watched)
	}
	arm := !in.childWatch
	in.childWatch = true // before the call: its event may come before the answer
	in.mu.Unlock()
	var names []string
	var err error
	if arm {
		names, _, _, err = in.c.zk().ChildrenW(in.dir)
	} else {
		names, _, err = in.c.zk().Children(in.dir)
	}
	if err != nil && arm {
		in.mu.Lock()
		in.childWatch = false // no watch is set on an error
		in.mu.Unlock()
	}
	if errors.Is(err, zk.ErrNoNode) {
		// Not created yet, or a Curator container reaped when empty.
		in.mu.Lock()
		armExist := !in.existWatch
		in.existWatch = true
		in.mu.Unlock()
		var exists bool
		var eerr error
		if armExist {
			exists, _, _, eerr = in.c.zk().ExistsW(in.dir) // sets a watch either way
		} else {
			exists, _, eerr = in.c.zk().Exists(in.dir)
		}
		if eerr != nil {
			if armExist {
				in.mu.Lock()
				in.existWatch = false
				in.mu.Unlock()
			}
			return fmt.Errorf("sd: watch %s: %w", in.dir, eerr)
		}
		if exists {
			return in.list(w) // created in between
		}
		in.mu.Lock()
		for n, e := range in.entries {
			in.forgetLocked(n, e)
		}
		clear(in.unread)
		in.mu.Unlock()
		w.full, w.children, w.data = false, false, nil
		return nil
	}
	if err != nil {
		return fmt.Errorf("sd: list %s: %w", in.dir, err)
	}
	present := make(map[string]bool, len(names))
	if w.data == nil {
		w.data = map[string]bool{}
	}
	in.mu.Lock()
	for _, n := range names {
		present[n] = true
		if _, ok := in.entries[n]; !ok || w.full {
			w.data[n] = true
		}
	}
	for n, e := range in.entries {
		if !present[n] {
			in.forgetLocked(n, e)
		}
	}
	in.mu.Unlock()
	for n := range w.data {
		if !present[n] {
			delete(w.data, n)
		}
	}
	w.full, w.children = false, false
	return nil
}

// bulkMin is the smallest full load worth a second session.
const bulkMin = 16

// bulkLoad reads the children in w.data with multiRead over s (opened here
// when nil) and, when every one was read, publishes that complete set at
// once. The watches are armed by the per-node reads that follow, which
// also catch any change in between. On any failure it does nothing and
// returns false: those reads load the set as well.
func (in *Instancer) bulkLoad(w *changes, s *bulkSession) bool {
	names := make([]string, 0, len(w.data))
	for n := range w.data {
		names = append(names, n)
	}
	if s == nil {
		if s = in.openBulk(); s == nil {
			return false
		}
		defer s.close()
	}
	decoded, err := in.bulkDecode(s, names)
	if err != nil {
		in.logger.Debug("bulk read failed; reading node by node", "err", err)
		return false
	}
	in.bulkReads.Add(int64(len(names)))
	in.mu.Lock()
	defer in.mu.Unlock()
	for i, e := range decoded {
		in.entries[names[i]] = e
	}
	in.publishLocked()
	return true
}

type fetched struct {
	name  string
	entry *entry
	err   error
}

// nodeError tells a read error of one node (an ACL, a bad argument) from
// one of the connection, which fails the whole read.
func nodeError(err error) bool {
	return err != nil && !isTransient(err) && !errors.Is(err, zk.ErrClosing) && !errors.Is(err, zk.ErrNoNode)
}

// fetch reads the children in w.data concurrently over the one connection
// and arms a data watch on each that has none. After a bulk load (bulked),
// the data is already there: a node's watch is armed with exists, and its
// data read again only if it changed since.
func (in *Instancer) fetch(w *changes, bulked bool) error {
	names := make([]string, 0, len(w.data))
	for n := range w.data {
		names = append(names, n)
	}
	// What is already read (by a bulk load, typically) is not decoded again
	// when the node has not changed since: the read only arms its watch.
	known := make([]*entry, len(names))
	in.mu.Lock()
	for i, n := range names {
		known[i] = in.entries[n]
	}
	in.mu.Unlock()
	results := make([]fetched, len(names))
	workers := min(in.opts.concurrency, len(names))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(names) || in.ctx.Err() != nil {
					return
				}
				r := &results[i]
				r.name = names[i]
				if k := known[i]; bulked && k != nil && k.ok {
					stat, err := in.arm(names[i])
					if err == nil && stat.Czxid == k.czxid && stat.Version == k.version {
						r.entry = k
						continue
					}
					if err != nil && !nodeError(err) {
						r.err = err // gone, or the connection failed
						continue
					}
					// Changed since the bulk read: read it (its watch is armed).
				}
				data, stat, err := in.read(names[i])
				r.err = err
				switch {
				case err != nil:
				case known[i] != nil && known[i].ok && known[i].czxid == stat.Czxid && known[i].version == stat.Version:
					r.entry = known[i]
				default:
					r.entry = in.decode(names[i], data, stat) // decode while others wait on the network
				}
			}
		})
	}
	wg.Wait()
	in.fetches.Add(int64(len(names)))

	var firstErr error
	now := time.Now()
	in.mu.Lock()
	for _, r := range results {
		if r.name == "" {
			continue // not reached: stopping
		}
		switch {
		case errors.Is(r.err, zk.ErrNoNode):
			in.forgetLocked(r.name, in.entries[r.name])
			delete(w.data, r.name)
		case nodeError(r.err):
			in.unreadableLocked(r.name, r.err, now)
			delete(w.data, r.name)
		case r.err != nil:
			if firstErr == nil {
				firstErr = fmt.Errorf("sd: read %s/%s: %w", in.dir, r.name, r.err)
			}
		default:
			delete(w.data, r.name)
			delete(in.unread, r.name)
			in.entries[r.name] = r.entry
		}
	}
	in.mu.Unlock()
	return firstErr
}

// arm arms a data watch on a child unless one is armed, and returns its
// stat; zk.ErrNoNode when it is gone.
func (in *Instancer) arm(name string) (*zk.Stat, error) {
	in.mu.Lock()
	armed := in.watched[name]
	in.watched[name] = true // before the call: its event may come before the answer
	in.mu.Unlock()
	p := path.Join(in.dir, name)
	var exists bool
	var stat *zk.Stat
	var err error
	if armed {
		exists, stat, err = in.c.zk().Exists(p)
	} else {
		exists, stat, _, err = in.c.zk().ExistsW(p)
	}
	if err == nil && !exists {
		err = zk.ErrNoNode
	}
	if err != nil && !armed {
		in.mu.Lock()
		delete(in.watched, name) // no data watch (a missing node gets an exists watch, whose event re-reads it)
		in.mu.Unlock()
	}
	return stat, err
}

// read gets a child's data, arming a data watch unless one is armed.
func (in *Instancer) read(name string) ([]byte, *zk.Stat, error) {
	in.mu.Lock()
	arm := !in.watched[name]
	in.watched[name] = true // before the call: its event may come before the answer
	in.mu.Unlock()
	p := path.Join(in.dir, name)
	if !arm {
		return in.c.zk().Get(p)
	}
	data, stat, _, err := in.c.zk().GetW(p)
	if err != nil {
		in.mu.Lock()
		delete(in.watched, name) // no watch is set on an error
		in.mu.Unlock()
	}
	return data, stat, err
}

// unreadableLocked keeps child name out of the set, reports it the first
// time and schedules another read. in.mu must be held.
func (in *Instancer) unreadableLocked(name string, err error, now time.Time) {
	u, seen := in.unread[name]
	if !seen {
		u = &unreadable{}
		in.unread[name] = u
		in.unreadable.Add(1)
		if in.opts.metrics.Unreadable != nil {
			in.opts.metrics.Unreadable.Add(1)
		}
		in.logger.Warn("skipping a node that cannot be read; retrying it later", "path", path.Join(in.dir, name), "err", err)
	}
	u.err = err
	d := unreadableRetryMin << min(u.attempts, 10)
	u.due = now.Add(min(d, unreadableRetryMax))
	u.attempts++
	if e, ok := in.entries[name]; ok && e.ok {
		delete(in.tombs, e.inst.ID)
	}
	// Known but not published: a list does not read it again, the retry does.
	in.entries[name] = &entry{}
}

// dueRereads returns the unreadable children whose retry is due.
func (in *Instancer) dueRereads() changes {
	in.mu.Lock()
	defer in.mu.Unlock()
	now := time.Now()
	var c changes
	for name, u := range in.unread {
		if !u.due.After(now) {
			if c.data == nil {
				c.data = map[string]bool{}
			}
			c.data[name] = true
		}
	}
	return c
}

// nextReread returns the time until the earliest retry of an unreadable child.
func (in *Instancer) nextReread() (time.Duration, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	var next time.Time
	for _, u := range in.unread {
		if next.IsZero() || u.due.Before(next) {
			next = u.due
		}
	}
	if next.IsZero() {
		return 0, false
	}
	return max(time.Until(next), time.Millisecond), true
}

func (in *Instancer) decode(name string, data []byte, stat *zk.Stat) *entry {
	var inst Instance
	var pub string
	var err error
	if _, ok := in.opts.codec.(CuratorCodec); ok && in.publishesHostPort() {
		inst, pub, err = decodeCuratorAt(in.service, name, in.dir, data, in.opts.keepData, &in.meta)
	} else {
		inst, err = readNode(in.opts.codec, in.service, name, data, in.opts.keepData, &in.meta)
		inst.Path = in.dir + "/" + name // a child name has no '/'
	}
	if err != nil {
		in.malformed.Add(1)
		if in.opts.metrics.Malformed != nil {
			in.opts.metrics.Malformed.Add(1)
		}
		in.logger.Warn("skipping malformed node", "path", path.Join(in.dir, name), "err", err)
		return &entry{czxid: stat.Czxid, version: stat.Version}
	}
	inst.Czxid, inst.Version, inst.EphemeralOwner = stat.Czxid, stat.Version, stat.EphemeralOwner
	if pub == "" {
		pub = in.render(inst)
	}
	e := &entry{inst: inst, ok: true, czxid: stat.Czxid, version: stat.Version, out: inst.Status() == StatusOutOfService}
	e.setPub(pub) // while the node is in the cache, not later in the sort
	return e
}

// setErrLocked publishes err with the current set; it stays on every event
// until a read from ZooKeeper succeeds. in.mu must be held.
func (in *Instancer) setErrLocked(err error) {
	if in.pubErr != nil && in.pubErr.Error() == err.Error() {
		return
	}
	in.pubErr = err
	if !in.firstDone {
		in.firstDone = true
		close(in.first)
	}
	in.sentErr = err
	in.bump()
}

// publishLocked computes the set and, when it or the error changed, hands
// it to the subscribers. The error is kept: only a read clears it. in.mu
// must be held.
func (in *Instancer) publishLocked() { in.publishSortedLocked(in.orderedLocked()) }

// publishSortedLocked is publishLocked given every stored entry, sorted as
// orderedLocked sorts them. It filters all in place.
func (in *Instancer) publishSortedLocked(all []*entry) {
	now := time.Now()
	ents := all[:0] // filtered in place, in order
	for _, e := range all {
		if !e.ok || e.out {
			continue
		}
		if len(in.tombs) == 0 {
			ents = append(ents, e) // without reaching into inst for the ID
			continue
		}
		if t, ok := in.tombs[e.inst.ID]; ok {
			if e.inst.Czxid <= t.czxid && e.inst.Version <= t.version && now.Before(t.until) {
				continue
			}
			delete(in.tombs, e.inst.ID) // re-created, rewritten since, or expired
		}
		ents = append(ents, e)
	}
	strs := make([]string, len(ents))
	sorted := make([]*Instance, len(ents))
	for i, e := range ents {
		strs[i], sorted[i] = e.pub, &e.inst
	}
	prev := in.pubInst
	in.pubInst = sorted // same addresses or not, records (status, data) may have changed
	if in.firstDone && in.pubErr == in.sentErr && slices.Equal(strs, in.pub) && sameRegistrations(prev, sorted) {
		return
	}
	in.pub, in.sentErr = strs, in.pubErr
	if in.opts.metrics.Instances != nil {
		in.opts.metrics.Instances.Set(float64(len(strs)))
	}
	if !in.firstDone {
		in.firstDone = true
		close(in.first)
	}
	in.bump()
}

// sameRegistrations reports whether a and b, sorted alike, are the same
// registrations: a node deleted and created again under the same string in
// one batch of changes (a restart, a session's node re-created) is news to
// subscribers that key anything by the registration (a slow start ramp).
func sameRegistrations(a, b []*Instance) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] == b[i] {
			continue // the same entry: nothing to read (a cache miss each)
		}
		if a[i].Czxid != b[i].Czxid || a[i].ID != b[i].ID {
			return false
		}
	}
	return true
}

// Published is the string the Instancer publishes for inst: "host:port",
// or its URI with PublishURIs. Endpointers know instances by it.
func (in *Instancer) Published(inst Instance) string { return in.render(inst) }

func (in *Instancer) render(inst Instance) string {
	switch {
	case in.publishesHostPort():
		return inst.HostPort()
	case in.opts.uris:
		return inst.URI()
	}
	return inst.GRPCHostPort()
}

// publishesHostPort reports whether render gives inst.HostPort(), which
// decode then makes with the node's path and address in one string.
func (in *Instancer) publishesHostPort() bool { return !in.opts.uris && !in.opts.grpcAddrs }
