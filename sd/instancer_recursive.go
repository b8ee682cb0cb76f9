package sd

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/proptrace"
	"github.com/gracekit/gracekit/internal/zkconn"
	"github.com/gracekit/gracekit/internal/zkwire"
)

// This file is the Instancer's second feed: one persistent recursive watch
// (see zkconn.WatchSession) instead of a watch per node. The set, tombstones and
// fan-out are the Instancer's own and shared with the per-node feed
// (instancer_watch.go); only what feeds them differs. A creation or a data
// change reads that one node, a deletion reads nothing, and nothing lists
// the children again but a new watch session, which re-reads the service
// in bulk: the server does not replay what was missed while disconnected.

// WatchMode is how an Instancer learns of changes.
type WatchMode int

const (
	// WatchRecursive, the default, holds one persistent recursive watch
	// per service (ZooKeeper 3.6+) on the Client's watch session, which
	// every Instancer and Catalog of the Client shares.
	// A server that refuses addWatch (3.5, or WatchManagerOptimized) gets
	// WatchPerNode.
	WatchRecursive WatchMode = iota
	// WatchPerNode holds a children watch on the service and a data watch
	// on every instance node, over the Client's own session.
	WatchPerNode
)

func (m WatchMode) String() string {
	switch m {
	case WatchRecursive:
		return "recursive"
	case WatchPerNode:
		return "per-node"
	}
	return fmt.Sprintf("WatchMode(%d)", int(m))
}

// defaultWatchMode is the mode of an Instancer without WithWatchMode; the
// sd tests set it to run their suite in either mode.
var defaultWatchMode = WatchRecursive

// WithWatchMode sets how the Instancer watches (default WatchRecursive).
func WithWatchMode(m WatchMode) InstancerOption {
	return instancerOptionFunc(func(o *instancerOptions) error {
		if m != WatchRecursive && m != WatchPerNode {
			return &ConfigError{"watch mode", m.String(), "WatchRecursive or WatchPerNode"}
		}
		o.watch = m
		return nil
	})
}

// feed runs the Instancer's feed until Stop: the recursive one when asked
// and the server accepts it, else the per-node one.
func (in *Instancer) feed() {
	defer in.wg.Done()
	if in.opts.watch == WatchRecursive {
		if !in.runRecursive(in.c.watches()) {
			return
		}
	}
	in.mode.Store(int32(WatchPerNode))
	in.c.wantSession()
	in.logger.Info("watching the service with a watch per node", "mode", WatchPerNode.String())
	unsub := in.c.subscribe(in.onSession)
	defer unsub()
	unsubN := in.c.subscribeNodes(in.dir, in.onNode)
	defer unsubN()
	in.poke()
	in.run()
}

// runRecursive feeds the Instancer from ws until Stop (false) or until the
// server refused the watch (true).
func (in *Instancer) runRecursive(ws *zkconn.WatchSession) (refused bool) {
	f := zkconn.NewFeed()
	unsub := ws.Subscribe(in.dir, f)
	defer unsub()
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval = 50*time.Millisecond, 5*time.Second
	var retry, reread *time.Timer
	defer func() {
		for _, t := range []*time.Timer{retry, reread} {
			if t != nil {
				t.Stop()
			}
		}
	}()
	logged := false
	for {
		var retryC, rereadC <-chan time.Time
		if retry != nil {
			retryC = retry.C
		}
		if reread != nil {
			rereadC = reread.C
		}
		var due map[string]bool
		select {
		case <-in.ctx.Done():
			return false
		case <-in.c.Done():
			in.mu.Lock()
			in.setErrLocked(ErrClosed)
			in.mu.Unlock()
			<-in.ctx.Done()
			return false
		case <-f.Wake():
		case <-retryC:
			retry = nil
		case <-rereadC:
			reread = nil
			due = in.dueRereads().data
		}
		w := f.Take()
		if len(w.Ops) > 0 {
			proptrace.Mark(proptrace.Feed)
		}
		in.watchEvents.Add(w.Events)
		if in.opts.metrics.WatchEvents != nil && w.Events > 0 {
			in.opts.metrics.WatchEvents.Add(float64(w.Events))
		}
		if w.Refused != nil {
			return true
		}
		if w.Lost {
			in.mu.Lock()
			if in.firstDone {
				in.setErrLocked(ErrDisconnected)
			}
			in.mu.Unlock()
		}
		if w.Conn == nil {
			continue
		}
		if !logged {
			logged = true
			in.mode.Store(int32(WatchRecursive))
			in.logger.Info("watching the service with one persistent recursive watch", "mode", WatchRecursive.String())
		}
		if retry != nil && !w.Full {
			// Backing off after a failed re-read: deletions and reads of
			// what changed go on; the re-read waits for its timer.
			in.applyOps(w, due)
			continue
		}
		if retry != nil {
			retry.Stop()
			retry = nil
		}
		err := in.applyRecursive(w, due)
		switch {
		case err == nil:
			bo.Reset()
		case in.ctx.Err() != nil:
			return false
		case w.Conn.Err() != nil:
			// The session is gone: its successor re-reads everything.
		default:
			in.logger.Warn("reading the service failed; keeping the last set", "err", err)
			in.mu.Lock()
			in.setErrLocked(err)
			in.mu.Unlock()
			w.Full = true
			f.PutBack(w)
			retry = time.NewTimer(bo.NextBackOff())
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

// applyRecursive re-reads the service when w.Full, else applies w's ops.
func (in *Instancer) applyRecursive(w zkconn.Work, due map[string]bool) error {
	if !w.Full {
		return in.applyOps(w, due)
	}
	list := w.List
	if list == nil {
		list = w.Conn.Send(zkwire.OpGetChildren, zkwire.GetChildrenBody(in.dir))
	}
	r, err := list.Wait(in.ctx)
	if err := in.behind(w, r); err != nil {
		return err
	}
	if errors.Is(err, zk.ErrNoNode) {
		// Not created yet, or a Curator container reaped when empty; the
		// watch sees it come.
		in.mu.Lock()
		for n, e := range in.entries {
			in.forgetLocked(n, e)
		}
		clear(in.unread)
		in.pubErr = nil
		in.publishLocked()
		in.markLoadedLocked()
		in.readAtLocked(w)
		in.mu.Unlock()
		return nil
	}
	if err != nil {
		return fmt.Errorf("sd: list %s: %w", in.dir, err)
	}
	names, err := zkwire.ParseChildren(r.Body)
	if err != nil {
		return fmt.Errorf("sd: list %s: %w", in.dir, err)
	}
	in.mu.Lock()
	fresh := len(in.entries) == 0 // then every entry will be one of names
	in.mu.Unlock()
	order, err := in.readAndStore(w, names, true)
	if err != nil {
		return err
	}
	in.mu.Lock()
	if !fresh {
		present := make(map[string]bool, len(names))
		for _, n := range names {
			present[n] = true
		}
		for n, e := range in.entries {
			if !present[n] {
				in.forgetLocked(n, e)
			}
		}
	}
	// ZooKeeper answered in full: the set is its own again.
	in.pubErr = nil
	if order != nil {
		in.publishSortedLocked(order) // the set stored was empty: order is all of it
	} else {
		in.publishLocked()
	}
	in.markLoadedLocked()
	in.readAtLocked(w)
	in.mu.Unlock()
	return nil
}

// behind refuses a re-read's listing answered at a zxid lower than the one
// the published set was read at: a server behind what the Instancer showed
// (after a deletion, one that still has the node). Handshakes send the last
// zxid seen, so that such a server refuses the session; this is the fence
// behind that. Nothing of the listing is published: the connection is
// dropped, and the watch session resumes on the next server. The fence
// holds within the watch session's zxid order: a session that replaced a
// lost one starts from zxid 0, synced, and its first read is what the
// Instancer publishes (see lost.go).
func (in *Instancer) behind(w zkconn.Work, r zkwire.Reply) error {
	in.mu.Lock()
	floor := in.readZxid
	if in.readOrder != w.Lineage {
		floor = 0
	}
	in.mu.Unlock()
	if r.Header.Zxid <= 0 || r.Header.Zxid >= floor {
		return nil
	}
	in.logger.Warn("a server answered from behind the set already published; not publishing it, trying another server",
		"server", w.Conn.Addr(), "zxid", fmt.Sprintf("%#x", r.Header.Zxid), "published_zxid", fmt.Sprintf("%#x", floor))
	w.Conn.Drop()
	return fmt.Errorf("sd: list %s: %s answered at zxid %#x, behind the published set's %#x", in.dir, w.Conn.Addr(), r.Header.Zxid, floor)
}

// readAtLocked notes that what is published was read over w's connection:
// at its last zxid, at least, which every later handshake sends. in.mu
// must be held.
func (in *Instancer) readAtLocked(w zkconn.Work) {
	if in.readOrder != w.Lineage {
		in.readZxid, in.readOrder = 0, w.Lineage
	}
	in.readZxid = max(in.readZxid, w.Conn.LastZxid())
}

// applyOps drops the deleted children, then reads the created and changed
// ones and the unreadable ones whose retry is due.
func (in *Instancer) applyOps(w zkconn.Work, due map[string]bool) error {
	var names []string
	deleted := false
	in.mu.Lock()
	for n, op := range w.Ops {
		if op.Del {
			in.forgetLocked(n, in.entries[n])
			deleted = true
		} else {
			names = append(names, n)
		}
	}
	for n := range due {
		if _, ok := w.Ops[n]; !ok {
			names = append(names, n)
		}
	}
	if deleted {
		in.publishLocked() // a deletion leaves at once, before the reads
		in.readAtLocked(w)
	}
	in.mu.Unlock()
	if len(names) == 0 {
		return nil
	}
	if _, err := in.readAndStore(w, names, false); err != nil {
		return err // the caller re-reads the service
	}
	in.mu.Lock()
	in.publishLocked()
	in.readAtLocked(w)
	in.mu.Unlock()
	return nil
}

// readAndStore reads names over w's session and stores what it read:
// decoded nodes (the stored entry kept when czxid and version are
// unchanged), unreadable ones, and the gone ones forgotten. A connection
// failure stores nothing. A full read that stored every child into an
// empty set returns the stored entries sorted (orderedLocked's answer,
// for publishSortedLocked), else nil.
func (in *Instancer) readAndStore(w zkconn.Work, names []string, full bool) ([]*entry, error) {
	bulk := !in.opts.noBulk && len(names) > 1
	var known []*entry // filled in by start, once the first request is out
	// A first load (into an empty set) builds its map of entries as each
	// batch is decoded, while the server still sends the next, instead of
	// after the last reply: 1.3 to 1.7 ms at 10,000 nodes.
	var built map[string]*entry
	start := func() {
		known = make([]*entry, len(names))
		in.mu.Lock()
		for i, n := range names {
			known[i] = in.entries[n]
		}
		if full && bulk && len(in.entries) == 0 && len(in.unread) == 0 { // bulk: got runs on one goroutine
			built = make(map[string]*entry, len(names))
		}
		in.mu.Unlock()
	}
	decoded := make([]*entry, len(names))
	decodeOne := func(i int, r *zkwire.Read) {
		if r.Err != 0 {
			return
		}
		if k := known[i]; k != nil && k.ok && k.czxid == r.Stat.Czxid && k.version == r.Stat.Version {
			decoded[i] = k // the same node and version: nothing new
			return
		}
		st := zk.Stat{Czxid: r.Stat.Czxid, Mzxid: r.Stat.Mzxid, Version: r.Stat.Version, EphemeralOwner: r.Stat.EphemeralOwner}
		data := r.Data // aliases the reply, a whole batch of nodes
		if in.opts.keepData {
			data = bytes.Clone(data)
		}
		decoded[i] = in.decode(names[i], data, &st)
	}
	// Each batch is decoded as soon as it arrives, while the server still
	// sends the next ones, on this batch's goroutine alone: the server
	// needs a core to produce them. The last one to arrive is decoded over
	// every core, as nothing else is left to wait for. Reads later dropped
	// by Settle cost a decode for nothing, which is rare.
	decode := func(reads []zkwire.Read, lo int, more bool) {
		decodeBatch(reads, lo, more, decodeOne)
		if built != nil {
			for i := lo; i < lo+len(reads); i++ {
				if decoded[i] != nil {
					built[names[i]] = decoded[i]
				}
			}
		}
	}
	reads, seqs, err := zkconn.ReadNodes(in.ctx, w.Conn, in.dir, names, bulk, in.opts.concurrency, start, decode)
	if err != nil {
		return nil, fmt.Errorf("sd: read %s: %w", in.dir, err)
	}
	in.fetches.Add(int64(len(names)))
	if bulk && full {
		in.bulkReads.Add(int64(len(names)))
	}
	keep, ok := w.Feed.Settle(w.Gen, names, seqs)
	if !ok {
		return nil, nil // a new session re-reads everything
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if built != nil && len(built) == len(names) && allRead(reads, keep) && len(in.entries) == 0 {
		// Every child read and kept, none listed twice: the set is what
		// was decoded, and so is its order.
		in.entries = built
		order := slices.Clone(decoded)
		sortByPub(order)
		return order, nil
	}
	now := time.Now()
	if len(in.entries) == 0 {
		in.entries = make(map[string]*entry, len(names)) // a first load: no growing
	}
	for i, n := range names {
		switch r := &reads[i]; {
		case !keep[i]:
		case r.Err == zkwire.CodeNoNode:
			in.forgetLocked(n, in.entries[n])
		case r.Err != 0:
			in.unreadableLocked(n, &zkwire.Error{Code: r.Err}, now)
		default:
			delete(in.unread, n)
			in.entries[n] = decoded[i]
		}
	}
	return nil, nil
}

// allRead reports whether every read succeeded and is kept.
func allRead(reads []zkwire.Read, keep []bool) bool {
	for i := range reads {
		if reads[i].Err != 0 || !keep[i] {
			return false
		}
	}
	return true
}

// decodeBatch decodes reads, the batch from lo, with decodeOne: on this
// goroutine while more are to come, else over every core.
func decodeBatch(reads []zkwire.Read, lo int, more bool, decodeOne func(int, *zkwire.Read)) {
	if more || len(reads) < 2*recDecodeMin {
		for j := range reads {
			decodeOne(lo+j, &reads[j])
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(reads)/recDecodeMin+1) {
		wg.Go(func() {
			for j := int(next.Add(1) - 1); j < len(reads); j = int(next.Add(1) - 1) {
				decodeOne(lo+j, &reads[j])
			}
		})
	}
	wg.Wait()
}

// recDecodeMin is the reads worth another decoding core.
const recDecodeMin = 16
