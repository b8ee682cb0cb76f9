package zkconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/gracekit/gracekit/internal/failpoint"
	"github.com/gracekit/gracekit/internal/zkwire"
)

// A WatchSession is an sd Client's one read-only session for persistent
// recursive watches (ZooKeeper 3.6+ addWatch, mode PERSISTENT_RECURSIVE),
// shared by every Instancer and Catalog of the Client: one recursive watch
// per watched directory (a service, or a Catalog's base path, which covers
// the services under it), whose notifications it routes to the feeds
// subscribed by directory.
//
// Why a session of its own, spoken by internal/zkwire: go-zookeeper v1.0.4
// cannot send addWatch and has no hook for a custom request, and no Go
// client the module proxy serves can. Why one per watched service and not
// one on the base path: a consumer of a few services of a large registry
// would receive every other service's notifications. The server does not
// replay the events missed while a connection was down, so after any
// disconnect every feed re-reads its directory in bulk; the session itself
// is resumed (same id) when it is still alive, so a short disconnect costs
// the ensemble no new session. It creates nothing.
//
// Its handshakes send the highest zxid the session saw (zxid), so that a
// server behind it refuses it; that order holds from a session to the one
// that replaces an expired one, until the session is lost: no live
// connection for its timeout, and a server that runs behind it (see
// sd/lost.go). The next session then starts from zxid 0 and syncs before its
// first read. A connection that ends before it lived (watchLived), refused
// by the feeds' fences for instance, is a failed attempt: the next waits
// for the backoff.
//
// It opens when its first feed subscribes and closes when its last one
// leaves, or with the Client. It dials the servers in the Client's own
// shuffled order, moving to the next one on each failure, so the sessions
// of a fleet spread as go-zookeeper's do.
//
// A path watched in two modes by one session corrupts the older watch
// (ZOOKEEPER-4466): this session only ever adds recursive watches.
type WatchSession struct {
	cfg    WatchConfig
	logger *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	kick   chan struct{} // the feeds changed; buffered

	mu      sync.Mutex
	subs    map[string]map[*Feed]struct{} // by the directory whose children they follow
	fresh   map[*Feed]string              // subscribed while conn was up, not handed it yet
	conn    *zkwire.Conn                  // nil while there is none
	gen     uint64                        // counts connections
	roots   map[string]bool               // recursive watches added on conn
	refused error                         // the server refused addWatch: use per-node watches
	started bool
	lineage uint64 // counts the session's losses: a zxid order per count

	zxid atomic.Int64 // the highest zxid the session's connections saw in its zxid order

	created, resumed atomic.Int64 // sessions made and resumed, for tests and stats
	state            atomic.Int32 // a WatchState
	sid              atomic.Int64 // the connected session's id, else 0
}

// setState records the session's state and reports a change to
// WatchConfig.OnState.
func (ws *WatchSession) setState(s WatchState, sid int64, server string) {
	ws.sid.Store(sid)
	if WatchState(ws.state.Swap(int32(s))) == s || s == WatchIdle {
		return
	}
	ws.cfg.OnState(WatchEvent{State: s, SessionID: sid, Server: server, Time: time.Now()})
}

// errAddWatchRefused wraps the server's answer to addWatch when it is not a
// persistent-watch server: 3.5 answers UNIMPLEMENTED, a server with
// WatchManagerOptimized fails the request (MARSHALLINGERROR). Only those
// two answers switch the Client to per-node watches, for good (see
// addWatchRefused); any other failure is tried again.
var errAddWatchRefused = errors.New("sd: the server refused a persistent recursive watch (addWatch needs ZooKeeper 3.6+ without WatchManagerOptimized)")

// addWatchRefused reports whether err, addWatch's answer, says the server
// cannot hold persistent watches at all. A throttled request, a lost
// connection, an ACL or any other error says nothing of the kind: the
// session tries again, on the next server.
func addWatchRefused(err error) bool {
	switch zkwire.Code(err) {
	case zkwire.CodeUnimplemented, zkwire.CodeMarshalling:
		return true
	}
	return false
}

// WatchConfig is what a WatchSession needs of its owner (sd's Client),
// handed down so that the session holds no Client.
type WatchConfig struct {
	Logger         *slog.Logger
	SessionTimeout time.Duration
	// Servers is the ensemble in the Client's shuffled order.
	Servers func() []string
	// Dial opens a session to addr (sd's Client.dialWatch).
	Dial func(ctx context.Context, addr string, sid int64, passwd []byte, lastZxid int64, onEvent func(uint64, zkwire.WatcherEvent)) (*zkwire.Conn, error)
	// Behind probes whether the server at addr is behind zxid (sd/lost.go).
	Behind func(ctx context.Context, addr string, zxid int64) (at int64, behind bool)
	// OnState hears each change of the session's state; it must not block.
	OnState func(WatchEvent)
}

// WatchState is a WatchSession's state; sd reports it as its own State.
type WatchState int32

// Watch session states.
const (
	WatchIdle         WatchState = iota // not wanted: no feed, closed, or refused
	WatchConnecting                     // trying a server
	WatchHasSession                     // connected with a session
	WatchDisconnected                   // lost its connection; resuming the session
	WatchExpired                        // the session ended; a new one follows
)

// WatchEvent reports a change of a WatchSession's state.
type WatchEvent struct {
	State     WatchState
	SessionID int64
	Server    string
	Time      time.Time
}

// NewWatchSession makes a watch session that opens at its first
// subscriber.
func NewWatchSession(cfg WatchConfig) *WatchSession {
	ws := &WatchSession{
		cfg: cfg, logger: cfg.Logger.With("component", "sd.watch"),
		subs:  map[string]map[*Feed]struct{}{},
		fresh: map[*Feed]string{},
		done:  make(chan struct{}),
		kick:  make(chan struct{}, 1),
	}
	ws.ctx, ws.cancel = context.WithCancel(context.Background())
	return ws
}

// Close ends the session and waits for its goroutines. Idempotent.
func (ws *WatchSession) Close() {
	ws.cancel()
	ws.mu.Lock()
	started := ws.started
	ws.started = true // none starts after close
	ws.mu.Unlock()
	if !started {
		close(ws.done)
	}
	<-ws.done
}

func (ws *WatchSession) poke() {
	select {
	case ws.kick <- struct{}{}:
	default:
	}
}

// Subscribe makes f follow the children of dir until the returned func is
// called. f hears of the session's state at once or soon: the session
// opens with its first subscriber, and a subscriber that joins a session
// that is up gets it with its own listing, sent right behind its watch.
func (ws *WatchSession) Subscribe(dir string, f *Feed) (cancel func()) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.subs[dir] == nil {
		ws.subs[dir] = map[*Feed]struct{}{}
	}
	ws.subs[dir][f] = struct{}{}
	switch {
	case ws.refused != nil:
		f.refuse(ws.refused)
	case ws.conn != nil:
		ws.fresh[f] = dir
	}
	if !ws.started && ws.ctx.Err() == nil {
		ws.started = true
		go ws.run()
	}
	ws.poke()
	return func() {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		delete(ws.subs[dir], f)
		if len(ws.subs[dir]) == 0 {
			delete(ws.subs, dir)
		}
		delete(ws.fresh, f)
		ws.poke()
	}
}

func (ws *WatchSession) each(fn func(dir string, f *Feed)) {
	for dir, fs := range ws.subs {
		for f := range fs {
			fn(dir, f)
		}
	}
}

// wantedLocked is the set of directories to watch: those subscribed, less
// those a recursive watch on an ancestor already covers.
func (ws *WatchSession) wantedLocked() map[string]bool {
	want := make(map[string]bool, len(ws.subs))
	for dir := range ws.subs {
		covered := false
		for d := dir; d != "/" && !covered; {
			d = path.Dir(d)
			_, covered = ws.subs[d]
		}
		if !covered {
			want[dir] = true
		}
	}
	return want
}

// route hands a notification to the feeds of its parent. It runs on the
// Conn's read goroutine.
func (ws *WatchSession) route(seq uint64, ev zkwire.WatcherEvent) {
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

// Reconnect backoff of a watch session, and how long a connection must
// last to count as a success that resets it.
const (
	watchRetryMin = 50 * time.Millisecond
	watchRetryMax = time.Second
	watchLived    = time.Second
)

func (ws *WatchSession) run() {
	defer close(ws.done)
	defer ws.setState(WatchIdle, 0, "")
	bo := backoff.NewExponentialBackOff() // jittered: RandomizationFactor 0.5
	bo.InitialInterval, bo.MaxInterval = watchRetryMin, watchRetryMax
	pause := func() bool { // false: closing
		t := time.NewTimer(bo.NextBackOff())
		defer t.Stop()
		select {
		case <-ws.ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	var sid int64 // the session to resume; 0: none
	var passwd []byte
	var alive time.Time // when the session was last known alive; zero before the first
	timeout := ws.cfg.SessionTimeout
	suspect := "" // the last server that refused the session or dropped it before it lived
	server := 0   // into the Client's shuffled servers
	for {
		ws.mu.Lock()
		idle := len(ws.subs) == 0
		ws.mu.Unlock()
		if idle {
			ws.setState(WatchIdle, 0, "")
			select {
			case <-ws.ctx.Done():
				return
			case <-ws.kick:
				if !alive.IsZero() {
					alive = time.Now() // idle is not lost: the wait starts now
				}
				continue
			}
		}
		servers := ws.cfg.Servers()
		addr := servers[server%len(servers)]
		if suspect != "" && !alive.IsZero() && time.Since(alive) >= timeout {
			zxid := ws.zxid.Load()
			at, behind := ws.cfg.Behind(ws.ctx, suspect, zxid)
			if behind {
				// Lost (see sd/lost.go): no live connection for its timeout,
				// and a server that runs is behind it. A new session, from
				// zxid 0, in a zxid order of its own.
				ws.logger.Warn("the watch session had no server for its timeout and a server is behind it: lost; a new session starts from zxid 0 and syncs before it reads",
					"session", HexSession(sid), "server", suspect, "server_zxid", fmt.Sprintf("%#x", at), "session_zxid", fmt.Sprintf("%#x", zxid))
				if sid != 0 {
					ws.setState(WatchExpired, 0, addr)
				}
				sid, passwd = 0, nil
				ws.zxid.Store(0)
				ws.mu.Lock()
				ws.lineage++
				ws.mu.Unlock()
			}
			suspect = "" // probed once per refusal
		}
		if WatchState(ws.state.Load()) == WatchIdle {
			ws.setState(WatchConnecting, 0, addr)
		}
		conn, lists, roots, err := ws.open(addr, sid, passwd)
		switch {
		case ws.ctx.Err() != nil:
			if conn != nil {
				conn.Close()
			}
			return
		case errors.Is(err, errAddWatchRefused):
			ws.logger.Info("persistent watches refused; using a watch per node", "err", err)
			ws.mu.Lock()
			ws.refused = err
			ws.each(func(_ string, f *Feed) { f.refuse(err) })
			ws.mu.Unlock()
			return // the deferred setState: no longer wanted
		case errors.Is(err, zkwire.ErrSessionExpired):
			ws.setState(WatchExpired, 0, addr)
			sid, passwd = 0, nil // a new one, at once
			continue
		case err != nil:
			if errors.Is(err, zkwire.ErrRefused) {
				suspect = addr
			}
			if zkwire.Code(err) != 0 {
				// The server answered, and not that it cannot: worth a word.
				ws.logger.Warn("adding a recursive watch failed; trying the next server", "server", addr, "err", err)
			} else {
				ws.logger.Debug("watch session failed; trying the next server", "server", addr, "err", err)
			}
			server++
			if !pause() {
				return
			}
			continue
		}
		began := time.Now()
		if conn.SessionID() == sid {
			ws.resumed.Add(1)
		} else {
			ws.created.Add(1)
			alive, suspect = began, ""
		}
		sid, passwd, timeout = conn.SessionID(), conn.Passwd(), conn.Timeout()
		ws.setState(WatchHasSession, sid, addr)
		ws.mu.Lock()
		ws.gen++
		ws.conn, ws.roots = conn, roots
		gen, lineage := ws.gen, ws.lineage
		ws.each(func(dir string, f *Feed) {
			if list, ok := lists[f]; ok {
				f.up(conn, gen, lineage, list)
			} else {
				ws.fresh[f] = dir // subscribed during open
			}
		})
		ws.mu.Unlock()
		keep := ws.serve(conn)
		ws.saw(conn.LastZxid()) // before the next handshake, which sends it
		lived := time.Since(began) >= watchLived
		if lived {
			alive, suspect = time.Now(), ""
			bo.Reset()
		} else if keep {
			suspect = addr // dropped before it lived: a fence may have refused what it answered
		}
		if keep {
			conn.Drop() // lost: the next connection resumes the session
			server++    // and goes to the next server
		} else {
			conn.Close() // idle or closing: the server drops it now
			sid, passwd = 0, nil
			alive = time.Now()
		}
		// After the Conn ended, so that no notification of it is routed.
		ws.mu.Lock()
		ws.conn, ws.roots = nil, nil
		clear(ws.fresh)
		ws.each(func(_ string, f *Feed) { f.down() })
		ws.mu.Unlock()
		if keep {
			ws.setState(WatchDisconnected, 0, addr)
			ws.logger.Debug("watch session lost; resuming it", "session", HexSession(sid), "err", conn.Err())
			if !lived && !pause() {
				// Dropped right after it began (a fence refused what the
				// server answered, say): a failed attempt, not a success
				// that earns an immediate reconnect.
				return
			}
		}
	}
}

// saw notes a zxid a connection of the session saw, for the next handshake.
// Only run's goroutine writes.
func (ws *WatchSession) saw(z int64) {
	if z > ws.zxid.Load() {
		ws.zxid.Store(z)
	}
}

// serve keeps conn's watches in line with the feeds until conn is lost
// (true: resume it) or the last feed left or the session closes (false).
func (ws *WatchSession) serve(conn *zkwire.Conn) (lost bool) {
	for {
		if err := ws.reconcile(conn); err != nil {
			if conn.Err() == nil {
				ws.logger.Warn("adding a watch failed; reconnecting", "err", err)
			}
			return true
		}
		ws.mu.Lock()
		idle := len(ws.subs) == 0
		ws.mu.Unlock()
		if idle {
			return false
		}
		select {
		case <-conn.Done():
			return true
		case <-ws.ctx.Done():
			return false
		case <-ws.kick:
		}
	}
}

// reconcile adds the watches that feeds need and conn lacks, removes those
// no feed needs any more, and hands the feeds that joined meanwhile the
// session with a listing sent right behind their watch. It waits for the
// added watches' replies.
func (ws *WatchSession) reconcile(conn *zkwire.Conn) error {
	type joiner struct {
		dir string
		f   *Feed
	}
	ws.mu.Lock()
	want := ws.wantedLocked()
	var add, remove []string
	for d := range want {
		if !ws.roots[d] {
			add = append(add, d)
		}
	}
	for d := range ws.roots {
		if !want[d] {
			remove = append(remove, d)
		}
	}
	var joiners []joiner
	for f, dir := range ws.fresh {
		joiners = append(joiners, joiner{dir, f})
	}
	clear(ws.fresh)
	ws.mu.Unlock()
	if len(add)+len(remove)+len(joiners) == 0 {
		return nil
	}
	// Sent outside ws.mu: a write may block on a stalled server, while
	// the read goroutine needs ws.mu to route.
	reqs := make([]zkwire.Req, 0, len(add)+len(remove)+len(joiners))
	for _, d := range add {
		reqs = append(reqs, zkwire.Req{Op: zkwire.OpAddWatch, Body: zkwire.AddWatchBody(d, zkwire.ModePersistentRecursive)})
	}
	for _, d := range remove {
		reqs = append(reqs, zkwire.Req{Op: zkwire.OpRemoveWatches, Body: zkwire.RemoveWatchesBody(d, zkwire.WatcherAny)})
	}
	for _, j := range joiners {
		reqs = append(reqs, zkwire.Req{Op: zkwire.OpGetChildren, Body: zkwire.GetChildrenBody(j.dir)})
	}
	calls := conn.SendAll(reqs...)
	ws.mu.Lock()
	lineage := ws.lineage
	for _, d := range add {
		ws.roots[d] = true
	}
	for _, d := range remove {
		delete(ws.roots, d)
	}
	for i, j := range joiners {
		if _, ok := ws.subs[j.dir][j.f]; ok {
			j.f.up(conn, ws.gen, lineage, calls[len(add)+len(remove)+i])
		}
	}
	ws.mu.Unlock()
	for i, d := range add {
		if _, err := calls[i].Wait(ws.ctx); err != nil {
			return fmt.Errorf("sd: add a recursive watch on %s: %w", d, err)
		}
	}
	for i, d := range remove {
		// A watch left behind costs notifications nobody reads, not
		// correctness: the next session goes without it.
		if _, err := calls[len(add)+i].Wait(ws.ctx); err != nil {
			ws.logger.Debug("removing a watch failed", "path", d, "err", err)
		}
	}
	return nil
}

// open dials addr, resuming session sid when it is not 0, and adds a
// recursive watch per wanted directory. Right behind the watches it sends
// each feed's children listing, which the server answers after the watches
// are in place: the feeds' re-read then waits for no round trip of its
// own. A new session that replaced a lost one, from zxid 0, syncs first
// (see sd/lost.go), in the same write: the server answers a session's
// requests in order, so the listings see every write the ensemble
// committed before the sync.
func (ws *WatchSession) open(addr string, sid int64, passwd []byte) (*zkwire.Conn, map[*Feed]*zkwire.Call, map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ws.ctx, ws.cfg.SessionTimeout)
	defer cancel()
	zxid := ws.zxid.Load()
	conn, err := ws.cfg.Dial(ctx, addr, sid, passwd, zxid, ws.route)
	if err != nil {
		return nil, nil, nil, err
	}
	ws.mu.Lock()
	syncFirst := conn.SessionID() != sid && zxid == 0 && ws.lineage > 0
	ws.mu.Unlock()
	failpoint.Inject(failpoint.WatchBeforeRewatch)
	type sub struct {
		dir string
		f   *Feed
	}
	var subs []sub
	ws.mu.Lock()
	roots := ws.wantedLocked()
	ws.each(func(dir string, f *Feed) { subs = append(subs, sub{dir, f}) })
	ws.mu.Unlock()
	reqs := make([]zkwire.Req, 0, 1+len(roots)+len(subs))
	if syncFirst {
		reqs = append(reqs, zkwire.Req{Op: zkwire.OpSync, Body: zkwire.SyncBody("/")})
	}
	first := len(reqs) // the watches' calls
	for _, d := range slices.Sorted(maps.Keys(roots)) {
		reqs = append(reqs, zkwire.Req{Op: zkwire.OpAddWatch, Body: zkwire.AddWatchBody(d, zkwire.ModePersistentRecursive)})
	}
	for _, x := range subs {
		reqs = append(reqs, zkwire.Req{Op: zkwire.OpGetChildren, Body: zkwire.GetChildrenBody(x.dir)})
	}
	calls := conn.SendAll(reqs...)
	lists := make(map[*Feed]*zkwire.Call, len(subs))
	for i, x := range subs {
		lists[x.f] = calls[first+len(roots)+i]
	}
	if syncFirst {
		if _, err := calls[0].Wait(ctx); err != nil {
			conn.Close()
			return nil, nil, nil, fmt.Errorf("sd: sync the new watch session: %w", err)
		}
	}
	for i := first; i < first+len(roots); i++ {
		_, err := calls[i].Wait(ctx)
		if addWatchRefused(err) {
			err = errors.Join(errAddWatchRefused, err)
		}
		if err != nil {
			ws.saw(conn.LastZxid())
			conn.Close()
			return nil, nil, nil, err
		}
	}
	return conn, lists, roots, nil
}

// Stats counts the sessions the server created and the reconnects that
// kept their session, since NewWatchSession.
func (ws *WatchSession) Stats() (created, resumed int64) {
	return ws.created.Load(), ws.resumed.Load()
}

// State is the session's state now; WatchIdle while it is not wanted.
func (ws *WatchSession) State() WatchState { return WatchState(ws.state.Load()) }

// SessionID is the connected session's id, else 0.
func (ws *WatchSession) SessionID() int64 { return ws.sid.Load() }

// WatchView is a WatchSession seen from outside, for sd's tests.
type WatchView struct {
	Conn   *zkwire.Conn // nil while there is none
	Roots  []string     // the recursive watches held on Conn
	Zxid   int64        // what the next handshake sends
	Losses uint64       // the sessions given up as lost (sd/lost.go)
}

// View is the session now (for sd's tests: export_test.go).
func (ws *WatchSession) View() WatchView {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return WatchView{Conn: ws.conn, Roots: slices.Collect(maps.Keys(ws.roots)), Zxid: ws.zxid.Load(), Losses: ws.lineage}
}

// Feed is what a WatchSession owes one subscriber: the current session,
// whether everything must be read again, and what the notifications asked
// for since the subscriber last looked. Its methods never block.
type Feed struct {
	mu      sync.Mutex
	conn    *zkwire.Conn
	gen     uint64
	lineage uint64       // the watch session's zxid order conn is in (see sd's Instancer.behind)
	full    bool         // a new session: read everything again
	list    *zkwire.Call // the new session's children listing, sent ahead; nil: list anew
	lost    bool         // the session went away
	refused error
	ops     map[string]ChildOp // by child name
	events  int64              // notifications since the last take
	wake    chan struct{}
}

// ChildOp is what a notification asked for one child: read it (created or
// changed), or drop it (deleted, at stream position Seq).
type ChildOp struct {
	Del bool
	Seq uint64
}

// Work is a Feed's news, taken at once.
type Work struct {
	Feed    *Feed
	Conn    *zkwire.Conn // nil: no session now
	Gen     uint64       // counts the watch session's connections
	Lineage uint64       // the watch session's zxid order Conn is in
	Full    bool         // a new session: read everything again
	List    *zkwire.Call // with Full: the children listing sent ahead, or nil
	Lost    bool         // the session went away since the last Take
	Refused error        // the server refused addWatch: watch per node
	Ops     map[string]ChildOp
	Events  int64 // notifications since the last Take
}

// NewFeed makes a Feed to hand to WatchSession.Subscribe.
func NewFeed() *Feed {
	return &Feed{ops: map[string]ChildOp{}, wake: make(chan struct{}, 1)}
}

// Wake is signalled when the Feed has news for Take.
func (f *Feed) Wake() <-chan struct{} { return f.wake }

func (f *Feed) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// up hands f a new session. The ops noted so far are the new session's
// own (down dropped the old one's): its notifications are routed from
// addWatch on, and some may have come after the listing sent ahead was
// answered, so they stay to be applied after the re-read.
func (f *Feed) up(conn *zkwire.Conn, gen, lineage uint64, list *zkwire.Call) {
	f.mu.Lock()
	f.conn, f.gen, f.lineage, f.full, f.list = conn, gen, lineage, true, list
	f.mu.Unlock()
	f.poke()
}

// down drops the session; nothing of it is routed any more, and the
// re-read of the next one covers every op noted on this one.
func (f *Feed) down() {
	f.mu.Lock()
	f.conn, f.lost, f.list = nil, true, nil
	clear(f.ops)
	f.mu.Unlock()
	f.poke()
}

func (f *Feed) refuse(err error) {
	f.mu.Lock()
	f.refused = err
	f.mu.Unlock()
	f.poke()
}

// event notes a notification about a child. A later op on the same child
// replaces an earlier one: a read made after both sees the newest state.
func (f *Feed) event(seq uint64, ev zkwire.WatcherEvent) {
	name := path.Base(ev.Path)
	f.mu.Lock()
	f.events++
	switch ev.Type {
	case zkwire.EventNodeCreated, zkwire.EventNodeDataChanged:
		f.ops[name] = ChildOp{}
	case zkwire.EventNodeDeleted:
		f.ops[name] = ChildOp{Del: true, Seq: seq}
	default:
		// NodeChildrenChanged reaches recursive watchers too on 3.6–3.8
		// (ZOOKEEPER-4475); the children's own events say it all.
	}
	f.mu.Unlock()
	f.poke()
}

// Take returns the Feed's news and clears it.
func (f *Feed) Take() Work {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := Work{Feed: f, Conn: f.conn, Gen: f.gen, Lineage: f.lineage, Full: f.full, Lost: f.lost, Refused: f.refused, Events: f.events}
	if w.Full {
		w.List = f.list // waited for once, by this work
	}
	f.full, f.lost, f.events, f.list = false, false, 0, nil
	switch {
	case f.conn == nil || len(f.ops) == 0:
	case w.Full:
		// A re-read ignores ops, and its listing may be older than some
		// of them: they stay (Settle weighs them against the reads) and
		// are applied right after it.
		f.poke()
	default:
		w.Ops, f.ops = f.ops, map[string]ChildOp{}
	}
	return w
}

// PutBack returns work that failed, unless a new session made it moot.
func (f *Feed) PutBack(w Work) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gen != w.Gen || f.conn == nil {
		return
	}
	f.full = f.full || w.Full
	for n, op := range w.Ops {
		if _, ok := f.ops[n]; !ok {
			f.ops[n] = op
		}
	}
}

// Settle decides, for reads answered at stream positions seqs, which may be
// stored: not one whose child was deleted after the read. A deletion seen
// before the read is what the read already shows, and is dropped. It
// returns false when a new session made the reads moot.
func (f *Feed) Settle(gen uint64, names []string, seqs []uint64) (keep []bool, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gen != gen {
		return nil, false
	}
	keep = make([]bool, len(names))
	for i, n := range names {
		op, pending := f.ops[n]
		switch {
		case pending && op.Del && op.Seq > seqs[i]:
		case pending && op.Del:
			delete(f.ops, n)
			keep[i] = true
		default:
			keep[i] = true
		}
	}
	return keep, true
}
