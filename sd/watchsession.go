package sd

import (
	"context"
	"errors"
	"log/slog"
	"path"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/gracekit/gracekit/internal/zkwire"
)

// A watchSession holds one persistent recursive watch (ZooKeeper 3.6+
// addWatch, mode PERSISTENT_RECURSIVE) on root, over a read-only session of
// its own, and hands the notifications to feeds subscribed by directory.
//
// Why a session of its own, spoken by internal/zkwire: go-zookeeper v1.0.4
// cannot send addWatch and has no hook for a custom request, and no Go
// client the module proxy serves can. Why disposable: the server re-adds a
// persistent watch on a reconnect without replaying the events missed
// meanwhile, so a full re-read is owed after any disconnect anyway; on any
// failure the session is dropped, and a fresh one adds the watch again and
// every feed re-reads its nodes in bulk over it. It creates nothing, so its
// end costs nothing but the watch.
//
// A path watched in two modes by one session corrupts the older watch
// (ZOOKEEPER-4466): this session only ever adds the one recursive watch.
type watchSession struct {
	c      *Client
	root   string // server path
	logger *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	subs    map[string]map[*recFeed]struct{} // by the directory whose children they follow
	conn    *zkwire.Conn                     // with the watch added; nil while there is none
	gen     uint64                           // counts sessions
	refused error                            // the server refused addWatch: use per-node watches
	started sync.Once
}

// errAddWatchRefused wraps the server's answer to addWatch when it is not a
// persistent-watch server: 3.5 answers UNIMPLEMENTED, a server with
// WatchManagerOptimized fails the request (MARSHALLINGERROR).
var errAddWatchRefused = errors.New("sd: the server refused a persistent recursive watch (addWatch needs ZooKeeper 3.6+ without WatchManagerOptimized)")

func newWatchSession(c *Client, root string, logger *slog.Logger) *watchSession {
	ws := &watchSession{
		c: c, root: root, logger: logger.With("watch", root),
		subs: map[string]map[*recFeed]struct{}{},
		done: make(chan struct{}),
	}
	ws.ctx, ws.cancel = context.WithCancel(context.Background())
	return ws
}

// start starts the session once its first subscriber is in: then the
// first session's listing goes out right behind addWatch (see open), not a
// round trip later, whichever goroutine runs first. Idempotent.
func (ws *watchSession) start() { ws.started.Do(func() { go ws.run() }) }

// close ends the session and waits for its goroutines. Idempotent.
func (ws *watchSession) close() {
	ws.cancel()
	ws.start() // a session never started ends at once
	<-ws.done
}

// subscribe makes f follow the children of dir until the returned func is
// called. f hears of the current session at once.
func (ws *watchSession) subscribe(dir string, f *recFeed) (cancel func()) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.subs[dir] == nil {
		ws.subs[dir] = map[*recFeed]struct{}{}
	}
	ws.subs[dir][f] = struct{}{}
	switch {
	case ws.refused != nil:
		f.refuse(ws.refused)
	case ws.conn != nil:
		f.up(ws.conn, ws.gen, nil)
	}
	return func() {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		delete(ws.subs[dir], f)
		if len(ws.subs[dir]) == 0 {
			delete(ws.subs, dir)
		}
	}
}

func (ws *watchSession) each(fn func(dir string, f *recFeed)) {
	for dir, fs := range ws.subs {
		for f := range fs {
			fn(dir, f)
		}
	}
}

// route hands a notification to the feeds of its parent. It runs on the
// Conn's read goroutine.
func (ws *watchSession) route(seq uint64, ev zkwire.WatcherEvent) {
	if ev.Path == "" || ev.Path == "/" {
		return
	}
	dir := path.Dir(ev.Path)
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for f := range ws.subs[dir] {
		f.event(seq, ev)
	}
}

// Reconnect backoff of a watch session.
const (
	watchRetryMin = 50 * time.Millisecond
	watchRetryMax = time.Second
)

func (ws *watchSession) run() {
	defer close(ws.done)
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval = watchRetryMin, watchRetryMax
	// retry is nil when the next attempt goes at once (the first one, and
	// the one after a lost session): a timer's hop would be a scheduler
	// round on the path of every load.
	var retry <-chan time.Time
	for attempt := 0; ; attempt++ {
		if retry != nil {
			select {
			case <-ws.ctx.Done():
				return
			case <-retry:
			}
		} else if ws.ctx.Err() != nil {
			return
		}
		retry = nil
		conn, lists, err := ws.open(attempt)
		if errors.Is(err, errAddWatchRefused) {
			ws.logger.Info("persistent watches refused; using a watch per node", "err", err)
			ws.mu.Lock()
			ws.refused = err
			ws.each(func(_ string, f *recFeed) { f.refuse(err) })
			ws.mu.Unlock()
			return
		}
		if err != nil {
			if ws.ctx.Err() != nil {
				return
			}
			ws.logger.Debug("watch session failed; retrying", "err", err)
			retry = time.After(bo.NextBackOff())
			continue
		}
		bo.Reset()
		ws.mu.Lock()
		ws.gen++
		ws.conn = conn
		gen := ws.gen
		ws.each(func(_ string, f *recFeed) { f.up(conn, gen, lists[f]) })
		ws.mu.Unlock()
		select {
		case <-conn.Done():
			ws.logger.Debug("watch session lost", "err", conn.Err())
		case <-ws.ctx.Done():
		}
		conn.Close() // no notification is routed after it returns
		ws.mu.Lock()
		ws.conn = nil
		ws.each(func(_ string, f *recFeed) { f.down() })
		ws.mu.Unlock()
	}
}

// open takes the Client's watch session opened ahead, or dials a server
// (the Client's own first, then the others in turn), and adds the watch.
// Right behind addWatch it sends each feed's children listing, which the
// server answers after the watch is in place: the feeds' first re-read
// then waits for no round trip of its own.
func (ws *watchSession) open(attempt int) (*zkwire.Conn, map[*recFeed]*zkwire.Call, error) {
	ctx, cancel := context.WithTimeout(ws.ctx, ws.c.SessionTimeout())
	defer cancel()
	conn := ws.c.ahead.take(ctx, ws.route)
	if conn == nil {
		addr := ws.c.firstServer
		if zc := ws.c.zkIfAny(); zc != nil && zc.Server() != "" {
			addr = zc.Server()
		}
		if attempt > 0 || addr == "" {
			addr = ws.c.servers[attempt%len(ws.c.servers)]
		}
		var err error
		if conn, err = ws.c.dialWatch(ctx, addr, ws.route); err != nil {
			return nil, nil, err
		}
	}
	// Sent outside ws.mu: a write may block on a stalled server, while the
	// read goroutine needs ws.mu to route. A feed that subscribes meanwhile
	// gets no listing and lists anew.
	type sub struct {
		dir string
		f   *recFeed
	}
	var subs []sub
	ws.mu.Lock()
	ws.each(func(dir string, f *recFeed) { subs = append(subs, sub{dir, f}) })
	ws.mu.Unlock()
	reqs := []zkwire.Req{{Op: zkwire.OpAddWatch, Body: zkwire.AddWatchBody(ws.root, zkwire.ModePersistentRecursive)}}
	for _, x := range subs {
		reqs = append(reqs, zkwire.Req{Op: zkwire.OpGetChildren, Body: zkwire.GetChildrenBody(x.dir)})
	}
	calls := conn.SendAll(reqs...)
	added := calls[0]
	lists := make(map[*recFeed]*zkwire.Call, len(subs))
	for i, x := range subs {
		lists[x.f] = calls[1+i]
	}
	_, err := added.Wait(ctx)
	if code := zkwire.Code(err); code != 0 && code != zkwire.CodeNoAuth {
		err = errors.Join(errAddWatchRefused, err)
	}
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, lists, nil
}

// recFeed is what a watchSession owes one subscriber: the current session,
// whether everything must be read again, and what the notifications asked
// for since the subscriber last looked. Its methods never block.
type recFeed struct {
	mu      sync.Mutex
	conn    *zkwire.Conn
	gen     uint64
	full    bool         // a new session: read everything again
	list    *zkwire.Call // the new session's children listing, sent ahead; nil: list anew
	lost    bool         // the session went away
	refused error
	ops     map[string]recOp // by child name
	events  int64            // notifications since the last take
	wake    chan struct{}
}

// recOp is what a notification asked for one child: read it (created or
// changed), or drop it (deleted, at stream position seq).
type recOp struct {
	del bool
	seq uint64
}

// recWork is a recFeed's news, taken at once.
type recWork struct {
	feed    *recFeed
	conn    *zkwire.Conn
	gen     uint64
	full    bool
	list    *zkwire.Call
	lost    bool
	refused error
	ops     map[string]recOp
	events  int64
}

func newRecFeed() *recFeed {
	return &recFeed{ops: map[string]recOp{}, wake: make(chan struct{}, 1)}
}

func (f *recFeed) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// up hands f a new session. The ops noted so far are the new session's
// own (down dropped the old one's): its notifications are routed from
// addWatch on, and some may have come after the listing sent ahead was
// answered, so they stay to be applied after the re-read.
func (f *recFeed) up(conn *zkwire.Conn, gen uint64, list *zkwire.Call) {
	f.mu.Lock()
	f.conn, f.gen, f.full, f.list = conn, gen, true, list
	f.mu.Unlock()
	f.poke()
}

// down drops the session; nothing of it is routed any more, and the
// re-read of the next one covers every op noted on this one.
func (f *recFeed) down() {
	f.mu.Lock()
	f.conn, f.lost, f.list = nil, true, nil
	clear(f.ops)
	f.mu.Unlock()
	f.poke()
}

func (f *recFeed) refuse(err error) {
	f.mu.Lock()
	f.refused = err
	f.mu.Unlock()
	f.poke()
}

// event notes a notification about a child. A later op on the same child
// replaces an earlier one: a read made after both sees the newest state.
func (f *recFeed) event(seq uint64, ev zkwire.WatcherEvent) {
	name := path.Base(ev.Path)
	f.mu.Lock()
	f.events++
	switch ev.Type {
	case zkwire.EventNodeCreated, zkwire.EventNodeDataChanged:
		f.ops[name] = recOp{}
	case zkwire.EventNodeDeleted:
		f.ops[name] = recOp{del: true, seq: seq}
	default:
		// NodeChildrenChanged reaches recursive watchers too on 3.6–3.8
		// (ZOOKEEPER-4475); the children's own events say it all.
	}
	f.mu.Unlock()
	f.poke()
}

func (f *recFeed) take() recWork {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := recWork{feed: f, conn: f.conn, gen: f.gen, full: f.full, lost: f.lost, refused: f.refused, events: f.events}
	if w.full {
		w.list = f.list // waited for once, by this work
	}
	f.full, f.lost, f.events, f.list = false, false, 0, nil
	switch {
	case f.conn == nil || len(f.ops) == 0:
	case w.full:
		// A re-read ignores ops, and its listing may be older than some
		// of them: they stay (settle weighs them against the reads) and
		// are applied right after it.
		f.poke()
	default:
		w.ops, f.ops = f.ops, map[string]recOp{}
	}
	return w
}

// putBack returns work that failed, unless a new session made it moot.
func (f *recFeed) putBack(w recWork) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gen != w.gen || f.conn == nil {
		return
	}
	f.full = f.full || w.full
	for n, op := range w.ops {
		if _, ok := f.ops[n]; !ok {
			f.ops[n] = op
		}
	}
}

// settle decides, for reads answered at stream positions seqs, which may be
// stored: not one whose child was deleted after the read. A deletion seen
// before the read is what the read already shows, and is dropped. It
// returns false when a new session made the reads moot.
func (f *recFeed) settle(gen uint64, names []string, seqs []uint64) (keep []bool, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gen != gen {
		return nil, false
	}
	keep = make([]bool, len(names))
	for i, n := range names {
		op, pending := f.ops[n]
		switch {
		case pending && op.del && op.seq > seqs[i]:
		case pending && op.del:
			delete(f.ops, n)
			keep[i] = true
		default:
			keep[i] = true
		}
	}
	return keep, true
}
