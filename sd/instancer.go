package sd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/go-kit/kit/metrics"
	kitsd "github.com/go-kit/kit/sd"
	"github.com/go-zookeeper/zk"
)

var _ kitsd.Instancer = (*Instancer)(nil)

// Instancer defaults.
const (
	// DefaultFetchConcurrency is how many node reads an Instancer keeps in
	// flight on its connection during a load.
	DefaultFetchConcurrency = 64
	// DefaultTombstoneTTL bounds how long an evicted instance stays out when
	// ZooKeeper never shows it gone nor re-created.
	DefaultTombstoneTTL = 10 * time.Minute
)

// ErrDisconnected is the Event.Err an Instancer publishes while its
// connection to ZooKeeper is lost; the instances are the last good set.
var ErrDisconnected = errors.New("sd: disconnected from ZooKeeper; instances are the last known set")

// InstancerOption configures an Instancer.
type InstancerOption interface{ applyInstancer(*instancerOptions) error }

type instancerOptions struct {
	basePath    string
	codec       Codec
	logger      *slog.Logger
	uris        bool
	concurrency int
	tombTTL     time.Duration
	metrics     InstancerMetrics
	noBulk      bool
}

type instancerOptionFunc func(*instancerOptions) error

func (f instancerOptionFunc) applyInstancer(o *instancerOptions) error { return f(o) }

// PublishURIs makes the Instancer publish URIs built from each instance's
// uriSpec (e.g. "https://10.0.0.13:8080") instead of "host:port".
func PublishURIs() InstancerOption {
	return instancerOptionFunc(func(o *instancerOptions) error { o.uris = true; return nil })
}

// FetchConcurrency sets how many node reads are in flight during a load
// (default 64, allowed 1 to 1024).
func FetchConcurrency(n int) InstancerOption {
	return instancerOptionFunc(func(o *instancerOptions) error {
		if n < 1 || n > 1024 {
			return &ConfigError{"fetch concurrency", fmt.Sprint(n), "allowed 1 to 1024"}
		}
		o.concurrency = n
		return nil
	})
}

// WithoutBulkLoad makes full loads read one node per request only. By
// default a full load of many nodes first reads them all with a few
// multiRead requests (ZooKeeper 3.6+) over a short-lived second session and
// publishes that set, then arms a watch per node; servers without
// multiRead fall back by themselves, so this is for measuring or for
// ensembles that limit sessions.
func WithoutBulkLoad() InstancerOption {
	return instancerOptionFunc(func(o *instancerOptions) error { o.noBulk = true; return nil })
}

// TombstoneTTL sets how long Evict keeps an instance out at most.
func TombstoneTTL(d time.Duration) InstancerOption {
	return instancerOptionFunc(func(o *instancerOptions) error {
		if d <= 0 {
			return &ConfigError{"tombstone TTL", d.String(), "must be positive"}
		}
		o.tombTTL = d
		return nil
	})
}

// InstancerMetrics are go-kit metrics an Instancer updates; nil ones are skipped.
type InstancerMetrics struct {
	Instances   metrics.Gauge   // instances published
	WatchEvents metrics.Counter // ZooKeeper watch events handled
	Malformed   metrics.Counter // nodes skipped as malformed
	Evictions   metrics.Counter // instances removed by Evict
}

// WithMetrics reports the Instancer's figures through go-kit metrics.
func WithMetrics(m InstancerMetrics) InstancerOption {
	return instancerOptionFunc(func(o *instancerOptions) error { o.metrics = m; return nil })
}

// InstancerStats are running totals since the Instancer started.
type InstancerStats struct {
	WatchEvents int64 // watch events handled
	Fetches     int64 // node reads
	Malformed   int64 // nodes skipped as malformed (each read counts)
	Publishes   int64 // complete sets published
	BulkReads   int64 // nodes read by multiRead during full loads
}

// Instancer watches one service's nodes and publishes the complete set of
// its instances to every registered channel whenever it changes, following
// go-kit's sd.Instancer contract. The first load reads every node
// concurrently over the one connection; later changes read only what
// changed. Instances whose status is OUT_OF_SERVICE are not published.
//
// Watches are re-armed after every error, reconnect and session expiry.
// While ZooKeeper is unreachable the last good set is published with
// ErrDisconnected (or the read error) in Event.Err. Malformed nodes are
// skipped, logged and counted. Many Instancers may share one Client.
type Instancer struct {
	c       *Client
	service string
	dir     string // chrooted service path
	opts    instancerOptions
	logger  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	unsub  func()
	first  chan struct{} // closed at the first publish
	loaded chan struct{} // closed once a set was read from ZooKeeper without error
	notify chan struct{} // wakes the dispatcher

	mu        sync.Mutex
	entries   map[string]*entry // by child node name
	tombs     map[string]tomb   // by instance id
	tombTimer *time.Timer       // lifts the earliest tombstone at its TTL
	pub       []string          // published set
	pubInst   []Instance
	pubErr    error
	version   uint64
	subs      map[chan<- kitsd.Event]*subscriber
	firstDone bool

	pmu     sync.Mutex
	pending changes
	wake    chan struct{}

	watchEvents, fetches, malformed, publishes, bulkReads atomic.Int64
}

type entry struct {
	inst    Instance
	ok      bool  // decoded; a malformed node is kept out of the set
	czxid   int64 // of the node read, malformed or not
	version int32 // data version read
}

type tomb struct {
	czxid int64
	until time.Time
}

type subscriber struct {
	cancel chan struct{} // closed by Deregister
	sent   uint64        // version last delivered
	busy   chan struct{} // non-nil while a send to it is under way; closed after
}

// changes is the work the run loop owes ZooKeeper's notifications.
type changes struct {
	full     bool             // every watch is lost: list and read everything
	children bool             // list the children again
	data     map[string]bool  // re-read these children
	deleted  map[string]int64 // these children are gone: name → czxid of the node the watch was on
	conn     int              // 0 no news, 1 disconnected, 2 connected
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

// NewInstancer starts watching service under the base path and returns
// once the first set is published or the session timeout passed; it keeps
// trying in the background either way.
//
// NewInstancer returns no error when the first load fails: check Err, or
// use NewInstancerContext.
func NewInstancer(c *Client, service string, opts ...InstancerOption) (*Instancer, error) {
	in, err := newInstancer(c, service, opts)
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(c.SessionTimeout())
	defer t.Stop()
	select {
	case <-in.first:
	case <-t.C:
	}
	return in, nil
}

func newInstancer(c *Client, service string, opts []InstancerOption) (*Instancer, error) {
	o := instancerOptions{
		basePath: DefaultBasePath, codec: CuratorCodec{}, logger: slog.New(slog.DiscardHandler),
		concurrency: DefaultFetchConcurrency, tombTTL: DefaultTombstoneTTL,
	}
	for _, opt := range opts {
		if err := opt.applyInstancer(&o); err != nil {
			return nil, err
		}
	}
	if c == nil {
		return nil, &ConfigError{"client", "nil", "a *sd.Client from NewClient"}
	}
	if !ValidNodeName(service) {
		return nil, &ConfigError{"service name", service, "a non-empty name without '/'"}
	}
	in := &Instancer{
		c: c, service: service, opts: o,
		dir:     c.full(path.Join(o.basePath, service)),
		entries: map[string]*entry{}, tombs: map[string]tomb{},
		subs:    map[chan<- kitsd.Event]*subscriber{},
		first:   make(chan struct{}),
		loaded:  make(chan struct{}),
		notify:  make(chan struct{}, 1),
		wake:    make(chan struct{}, 1),
		pending: changes{full: true},
	}
	in.logger = o.logger.With("component", "sd.instancer", "service", service)
	in.ctx, in.cancel = context.WithCancel(context.Background())
	in.unsub = c.subscribe(in.onSession)
	in.wg.Add(2)
	go in.run()
	go in.dispatch()
	in.poke()
	return in, nil
}

// NewInstancerContext is NewInstancer that waits until the service was
// read from ZooKeeper without error, or ctx ends. Then it stops the
// Instancer and returns the last read error (a missing service node is not
// an error: it is an empty service), so that a failed first load is not
// mistaken for an empty, healthy service.
func NewInstancerContext(ctx context.Context, c *Client, service string, opts ...InstancerOption) (*Instancer, error) {
	in, err := newInstancer(c, service, opts)
	if err != nil {
		return nil, err
	}
	select {
	case <-in.loaded:
		return in, nil
	case <-ctx.Done():
	}
	err = in.Err()
	in.Stop()
	if err == nil || errors.Is(err, ErrNotLoaded) {
		err = ctx.Err()
	}
	return nil, fmt.Errorf("sd: first load of service %q from %s: %w", service, in.dir, err)
}

// ErrNotLoaded is Instancer.Err before the service was first read.
var ErrNotLoaded = errors.New("sd: service not read from ZooKeeper yet")

// Err is the error on the set the Instancer publishes now: nil when it
// is what ZooKeeper holds, ErrNotLoaded before the first read completed,
// ErrDisconnected or a read error while the set may be stale. NewInstancer
// returns after the session timeout even when the first load failed; Err
// tells an empty service from one that could not be read.
func (in *Instancer) Err() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.firstDone {
		return ErrNotLoaded
	}
	if in.pubErr == nil {
		select {
		case <-in.loaded:
		default:
			return ErrNotLoaded
		}
	}
	return in.pubErr
}

// Register implements sd.Instancer: once the first load is done, ch
// receives the current set before Register returns (as go-kit's own
// Instancers do), then the complete set on every change. Later sends
// happen on the Instancer's dispatcher goroutine, never under a lock, and
// always carry the newest set.
func (in *Instancer) Register(ch chan<- kitsd.Event) {
	s := &subscriber{cancel: make(chan struct{})}
	in.mu.Lock()
	var ev kitsd.Event
	first := in.firstDone
	if first {
		ev = kitsd.Event{Instances: in.pub, Err: in.pubErr}
		s.sent, s.busy = in.version, make(chan struct{})
	}
	in.subs[ch] = s
	in.mu.Unlock()
	if first {
		in.send(ch, s, ev, s.sent)
	}
	in.signal()
}

// send delivers ev to s unless it is deregistered or the Instancer stops,
// then marks the send done. s.busy must have been set under in.mu.
func (in *Instancer) send(ch chan<- kitsd.Event, s *subscriber, ev kitsd.Event, version uint64) {
	delivered := false
	select {
	case <-s.cancel: // deregistered before the send began: ch may be closed
	default:
		select {
		case ch <- ev:
			delivered = true
		case <-s.cancel:
		case <-in.ctx.Done():
		}
	}
	in.mu.Lock()
	if delivered && version > s.sent {
		s.sent = version
	}
	close(s.busy)
	s.busy = nil
	in.mu.Unlock()
}

// Deregister implements sd.Instancer. Once it returns nothing more is sent
// on ch, so the caller may close it. It waits only for a send to ch itself.
func (in *Instancer) Deregister(ch chan<- kitsd.Event) {
	in.mu.Lock()
	s, ok := in.subs[ch]
	var busy chan struct{}
	if ok {
		delete(in.subs, ch)
		close(s.cancel)
		busy = s.busy
	}
	in.mu.Unlock()
	if busy != nil {
		<-busy
	}
}

// Stop implements sd.Instancer: it stops watching and waits for every
// goroutine of the Instancer. It is idempotent.
func (in *Instancer) Stop() {
	in.cancel()
	in.unsub()
	in.mu.Lock()
	if in.tombTimer != nil {
		in.tombTimer.Stop()
	}
	in.mu.Unlock()
	in.wg.Wait()
}

// Instances returns the published set as rich records, sorted like the strings.
func (in *Instancer) Instances() []Instance {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]Instance, len(in.pubInst))
	for i, inst := range in.pubInst {
		out[i] = inst.clone()
	}
	return out
}

// Stats returns running totals.
func (in *Instancer) Stats() InstancerStats {
	return InstancerStats{
		WatchEvents: in.watchEvents.Load(), Fetches: in.fetches.Load(),
		Malformed: in.malformed.Load(), Publishes: in.publishes.Load(),
		BulkReads: in.bulkReads.Load(),
	}
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
// gone, or re-created with a newer creation zxid (or the tombstone TTL
// passes). An id the Instancer does not list, or lists from another
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
		in.tombs[id] = tomb{czxid: e.inst.Czxid, until: time.Now().Add(in.opts.tombTTL)}
		if in.opts.metrics.Evictions != nil {
			in.opts.metrics.Evictions.Add(1)
		}
		in.logger.Info("evicted", "instance", id, "czxid", e.inst.Czxid)
		in.publishLocked(nil)
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
	in.publishLocked(nil) // drops the expired tombstones
	in.armTombTimerLocked()
}

func (in *Instancer) onSession(ev SessionEvent) {
	switch ev.State {
	case zk.StateDisconnected:
		in.note(changes{conn: 1})
	case zk.StateHasSession:
		in.note(changes{conn: 2})
	case zk.StateExpired:
		in.note(changes{full: true})
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

// watch forwards one zk watch's single event into the pending changes.
// czxid is the creation zxid of the child node watched (0 for the service
// node): a late deletion must not remove a node re-created since.
func (in *Instancer) watch(ch <-chan zk.Event, child string, czxid int64) {
	in.wg.Add(1) // called only from goroutines the WaitGroup already counts
	go func() {
		defer in.wg.Done()
		select {
		case ev := <-ch:
			in.watchEvents.Add(1)
			if in.opts.metrics.WatchEvents != nil {
				in.opts.metrics.WatchEvents.Add(1)
			}
			in.note(changeFor(ev, child, czxid))
		case <-in.ctx.Done():
		}
	}()
}

func changeFor(ev zk.Event, child string, czxid int64) changes {
	switch {
	case ev.Type == zk.EventNotWatching:
		// Closing: nothing to do. Expiry: the StateExpired session event,
		// which comes first, already asked for one full reload.
		if errors.Is(ev.Err, zk.ErrClosing) || errors.Is(ev.Err, zk.ErrSessionExpired) {
			return changes{}
		}
		return changes{full: true}
	case child == "":
		return changes{children: true}
	case ev.Type == zk.EventNodeDeleted:
		return changes{deleted: map[string]int64{child: czxid}}
	default:
		return changes{data: map[string]bool{child: true}}
	}
}

func (in *Instancer) run() {
	defer in.wg.Done()
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 50*time.Millisecond, 5*time.Second, 0
	var work changes
	var retry *time.Timer
	for {
		var retryC <-chan time.Time
		if retry != nil {
			retryC = retry.C
		}
		select {
		case <-in.ctx.Done():
			if retry != nil {
				retry.Stop()
			}
			return
		case <-in.c.Done():
			// The client is closed for good: say so once, then wait for Stop.
			in.mu.Lock()
			in.publishLocked(ErrClosed)
			in.mu.Unlock()
			if retry != nil {
				retry.Stop()
			}
			<-in.ctx.Done()
			return
		case <-in.wake:
		case <-retryC:
			retry = nil
		}
		work.merge(in.take())
		if retry != nil && work.conn != 2 {
			continue // backing off; a new session retries at once
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
			in.publishLocked(err)
			in.mu.Unlock()
			retry = time.NewTimer(bo.NextBackOff())
			continue
		}
		bo.Reset()
	}
}

// apply does the work in w against ZooKeeper. What fails stays in w.
func (in *Instancer) apply(w *changes) error {
	switch w.conn {
	case 1:
		w.conn = 0
		in.mu.Lock()
		if in.firstDone {
			in.publishLocked(ErrDisconnected)
		}
		in.mu.Unlock()
	case 2:
		w.conn = 0
		// Watches survive a reconnect within the session; the server
		// replays what changed meanwhile. Refresh only after an error.
		in.mu.Lock()
		failed := in.pubErr != nil
		in.mu.Unlock()
		if failed {
			w.children = true
		}
	}
	// Deletions first: the fastest news a consumer can get.
	if len(w.deleted) > 0 {
		in.mu.Lock()
		for name, czxid := range w.deleted {
			if e, ok := in.entries[name]; ok && e.czxid == czxid {
				delete(in.entries, name)
				delete(in.tombs, e.inst.ID)
			}
		}
		in.publishLocked(nil)
		in.mu.Unlock()
		w.deleted = nil
	}
	if !w.full && !w.children && len(w.data) == 0 {
		return nil // nothing read: a published error stands until a read succeeds
	}
	full := w.full
	if w.full || w.children {
		if err := in.list(w); err != nil {
			return err
		}
	}
	if full && !in.opts.noBulk && len(w.data) >= bulkMin {
		in.bulkLoad(w)
	}
	if len(w.data) > 0 {
		if err := in.fetch(w); err != nil {
			return err
		}
	}
	in.mu.Lock()
	in.publishLocked(nil)
	in.markLoadedLocked()
	in.mu.Unlock()
	return nil
}

// markLoadedLocked records that the published set was read from ZooKeeper.
func (in *Instancer) markLoadedLocked() {
	select {
	case <-in.loaded:
	default:
		close(in.loaded)
	}
}

// list reads the children and arms the children watch (or, when the
// service node is missing, an exists watch). New children go to w.data.
func (in *Instancer) list(w *changes) error {
	if err := in.ctx.Err(); err != nil {
		return err
	}
	names, _, ch, err := in.c.conn.ChildrenW(in.dir)
	if errors.Is(err, zk.ErrNoNode) {
		// Not created yet, or a Curator container reaped when empty.
		exists, _, ech, eerr := in.c.conn.ExistsW(in.dir)
		if eerr != nil {
			return fmt.Errorf("sd: watch %s: %w", in.dir, eerr)
		}
		in.watch(ech, "", 0)
		if exists {
			return in.list(w) // created in between
		}
		in.mu.Lock()
		clear(in.entries)
		clear(in.tombs)
		in.mu.Unlock()
		w.full, w.children, w.data = false, false, nil
		return nil
	}
	if err != nil {
		return fmt.Errorf("sd: list %s: %w", in.dir, err)
	}
	in.watch(ch, "", 0)
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
			delete(in.entries, n)
			delete(in.tombs, e.inst.ID)
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

// bulkLoad reads the children in w.data with multiRead and, when every one
// was read, publishes that complete set at once. The watches are armed by
// the per-node reads that follow, which also catch any change in between.
// On any failure it does nothing: those reads load the set as well.
func (in *Instancer) bulkLoad(w *changes) {
	names := make([]string, 0, len(w.data))
	for n := range w.data {
		names = append(names, n)
	}
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = path.Join(in.dir, n)
	}
	dial := in.c.opts.dialer
	if dial == nil {
		dial = net.DialTimeout
	}
	res, err := bulkRead(in.ctx, dial, in.c.conn.Server(), paths, in.c.SessionTimeout())
	if err != nil {
		in.logger.Debug("bulk read failed; reading node by node", "err", err)
		return
	}
	entries := make(map[string]*entry, len(res))
	for i, r := range res {
		if !r.ok {
			return // gone or unreadable: the set would not be complete
		}
		entries[names[i]] = in.decode(names[i], r.data, &r.stat)
	}
	in.bulkReads.Add(int64(len(res)))
	in.mu.Lock()
	defer in.mu.Unlock()
	for n, e := range entries {
		in.entries[n] = e
	}
	in.publishLocked(nil)
}

type fetched struct {
	name  string
	entry *entry
	ch    <-chan zk.Event
	err   error
}

// fetch reads the children in w.data concurrently over the one connection
// and arms a data watch on each.
func (in *Instancer) fetch(w *changes) error {
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(names) || in.ctx.Err() != nil {
					return
				}
				r := &results[i]
				r.name = names[i]
				var data []byte
				var stat *zk.Stat
				data, stat, r.ch, r.err = in.c.conn.GetW(path.Join(in.dir, names[i]))
				switch {
				case r.err != nil:
				case known[i] != nil && known[i].czxid == stat.Czxid && known[i].version == stat.Version:
					r.entry = known[i]
				default:
					r.entry = in.decode(names[i], data, stat) // decode while others wait on the network
				}
			}
		}()
	}
	wg.Wait()
	in.fetches.Add(int64(len(names)))

	var firstErr error
	in.mu.Lock()
	for _, r := range results {
		if r.name == "" {
			continue // not reached: stopping
		}
		switch {
		case errors.Is(r.err, zk.ErrNoNode):
			if e, ok := in.entries[r.name]; ok {
				delete(in.tombs, e.inst.ID)
			}
			delete(in.entries, r.name)
			delete(w.data, r.name)
		case r.err != nil:
			if firstErr == nil {
				firstErr = fmt.Errorf("sd: read %s/%s: %w", in.dir, r.name, r.err)
			}
		default:
			in.watch(r.ch, r.name, r.entry.czxid)
			delete(w.data, r.name)
			in.entries[r.name] = r.entry
		}
	}
	in.mu.Unlock()
	return firstErr
}

func (in *Instancer) decode(name string, data []byte, stat *zk.Stat) *entry {
	inst, err := in.opts.codec.Decode(in.service, name, data)
	if err != nil {
		in.malformed.Add(1)
		if in.opts.metrics.Malformed != nil {
			in.opts.metrics.Malformed.Add(1)
		}
		in.logger.Warn("skipping malformed node", "path", path.Join(in.dir, name), "err", err)
		return &entry{czxid: stat.Czxid, version: stat.Version}
	}
	inst.Path = path.Join(in.dir, name)
	inst.Czxid, inst.Version, inst.EphemeralOwner = stat.Czxid, stat.Version, stat.EphemeralOwner
	return &entry{inst: inst, ok: true, czxid: stat.Czxid, version: stat.Version}
}

// publishLocked computes the set and, when it or the error changed, hands
// it to the dispatcher. in.mu must be held.
func (in *Instancer) publishLocked(err error) {
	if err != nil {
		if in.pubErr != nil && in.pubErr.Error() == err.Error() {
			return
		}
		in.pubErr = err
		if !in.firstDone {
			in.firstDone = true
			close(in.first)
		}
		in.bump()
		return
	}
	now := time.Now()
	insts := make([]Instance, 0, len(in.entries))
	for _, e := range in.entries {
		if !e.ok || e.inst.Status() == StatusOutOfService {
			continue
		}
		if t, ok := in.tombs[e.inst.ID]; ok {
			if e.inst.Czxid <= t.czxid && now.Before(t.until) {
				continue
			}
			delete(in.tombs, e.inst.ID) // re-created, or expired
		}
		insts = append(insts, e.inst)
	}
	order := make([]int, len(insts))
	rendered := make([]string, len(insts))
	for i, inst := range insts {
		order[i], rendered[i] = i, in.render(inst)
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(rendered[a], rendered[b]) })
	strs := make([]string, len(insts))
	sorted := make([]Instance, len(insts))
	for i, j := range order {
		strs[i], sorted[i] = rendered[j], insts[j]
	}
	insts = sorted
	if in.firstDone && in.pubErr == nil && slices.Equal(strs, in.pub) {
		in.pubInst = insts // same addresses; records (status, data) may have changed
		return
	}
	in.pub, in.pubInst, in.pubErr = strs, insts, nil
	if in.opts.metrics.Instances != nil {
		in.opts.metrics.Instances.Set(float64(len(strs)))
	}
	if !in.firstDone {
		in.firstDone = true
		close(in.first)
	}
	in.bump()
}

// Published is the string the Instancer publishes for inst: "host:port",
// or its URI with PublishURIs. Endpointers know instances by it.
func (in *Instancer) Published(inst Instance) string { return in.render(inst) }

func (in *Instancer) render(inst Instance) string {
	if in.opts.uris {
		return inst.URI()
	}
	return inst.HostPort()
}

func (in *Instancer) bump() {
	in.version++
	in.publishes.Add(1)
	in.signal()
}

func (in *Instancer) signal() {
	select {
	case in.notify <- struct{}{}:
	default:
	}
}

// dispatch sends the latest set to every subscriber that has not seen it.
// It sends without holding in.mu, so a slow subscriber delays only the
// others' events, never discovery itself, and it always sends the newest set.
func (in *Instancer) dispatch() {
	defer in.wg.Done()
	for {
		select {
		case <-in.ctx.Done():
			return
		case <-in.notify:
		}
		for {
			in.mu.Lock()
			if !in.firstDone {
				in.mu.Unlock()
				break
			}
			var ch chan<- kitsd.Event
			var s *subscriber
			for c, sub := range in.subs {
				if sub.sent < in.version && sub.busy == nil {
					ch, s = c, sub
					break
				}
			}
			if s == nil {
				in.mu.Unlock()
				break
			}
			version := in.version
			ev := kitsd.Event{Instances: in.pub, Err: in.pubErr}
			s.busy = make(chan struct{})
			in.mu.Unlock()
			in.send(ch, s, ev, version)
			if in.ctx.Err() != nil {
				return
			}
		}
	}
}
