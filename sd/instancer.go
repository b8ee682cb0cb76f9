package sd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kit/kit/metrics"
	kitsd "github.com/go-kit/kit/sd"
)

var _ kitsd.Instancer = (*Instancer)(nil)

// Instancer defaults.
const (
	// DefaultFetchConcurrency is how many node reads an Instancer keeps in
	// flight on its connection during a load.
	DefaultFetchConcurrency = 64
	// DefaultTombstoneTTL bounds how long an evicted instance stays out when
	// ZooKeeper never shows it gone, re-created or rewritten: as long as
	// endpoint.DefaultEvictionHold, so that a flush never keeps a live,
	// unchanged registration out longer than an Endpointer would.
	DefaultTombstoneTTL = 30 * time.Second
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
	grpcAddrs   bool
	concurrency int
	tombTTL     time.Duration
	metrics     InstancerMetrics
	noBulk      bool
	keepData    bool
	watch       WatchMode
}

type instancerOptionFunc func(*instancerOptions) error

func (f instancerOptionFunc) applyInstancer(o *instancerOptions) error { return f(o) }

// PublishURIs makes the Instancer publish URIs built from each instance's
// uriSpec (e.g. "https://10.0.0.13:8080") instead of "host:port".
func PublishURIs() InstancerOption {
	return instancerOptionFunc(func(o *instancerOptions) error { o.uris = true; return nil })
}

// PublishGRPCAddresses makes the Instancer publish each instance's gRPC
// "host:port" (Instance.GRPCHostPort): for a go-kit gRPC Endpointer over a
// service whose providers serve HTTP and gRPC on two ports.
func PublishGRPCAddresses() InstancerOption {
	return instancerOptionFunc(func(o *instancerOptions) error { o.grpcAddrs = true; return nil })
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

// KeepNodeData makes the Instancer keep each node's bytes on its Instance,
// so that CuratorCodec.Encode of an Instance from Instances keeps the
// fields this package does not know. By default only what is published is
// kept (see CuratorCodec.Decode).
func KeepNodeData() InstancerOption {
	return instancerOptionFunc(func(o *instancerOptions) error { o.keepData = true; return nil })
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
	Unreadable  metrics.Counter // nodes skipped because they could not be read, once per node
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
	Unreadable  int64 // nodes skipped because they could not be read (once per node)
	Publishes   int64 // complete sets published
	BulkReads   int64 // nodes read by multiRead during full loads
	// WatchMode is how the Instancer watches now: WatchRecursive, or
	// WatchPerNode when asked or when the server refused addWatch.
	WatchMode WatchMode
}

// Instancer watches one service's nodes and publishes the complete set of
// its instances to every registered channel whenever it changes, following
// go-kit's sd.Instancer contract. The first load reads every node in bulk;
// later changes read only what changed, fed by one persistent recursive
// watch or by a watch per node (WithWatchMode; see the package doc).
// Instances whose status is OUT_OF_SERVICE are not published.
//
// Watches are re-armed after every error, reconnect and session expiry.
// While ZooKeeper is unreachable the last good set is published with
// ErrDisconnected (or the read error) in Event.Err, until the session is
// back and the set was read again. Malformed nodes, and nodes that cannot
// be read (an ACL the session lacks), are skipped, logged and counted;
// unreadable ones are read again after a backoff. An Instancer runs one
// goroutine, plus one per registered channel, whatever the number of
// instances; a slow subscriber delays only its own events (see Register).
// Many Instancers may share one Client.
type Instancer struct {
	c       *Client
	service string
	dir     string // chrooted service path
	opts    instancerOptions
	logger  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	first  chan struct{} // closed at the first publish
	loaded chan struct{} // closed once a set was read from ZooKeeper without error

	mu        sync.Mutex
	entries   map[string]*entry // by child node name
	tombs     map[string]tomb   // by instance id
	tombTimer *time.Timer       // lifts the earliest tombstone at its TTL
	pub       []string          // published set
	pubInst   []*Instance
	pubErr    error  // stays until a read from ZooKeeper succeeds
	sentErr   error  // the error of the last set handed to the subscribers
	readZxid  int64  // the zxid the recursive feed's published reads are at, at least (see behind)
	readOrder uint64 // the watch session's zxid order readZxid is in (zkconn.Work.Lineage)
	version   uint64
	subs      map[chan<- kitsd.Event]*subscriber
	firstDone bool
	fallback  fallbackState // a set published before the first load (instancer_fallback.go)

	// Watches armed (see instancer_watch.go).
	childWatch bool                   // children watch on the service node
	existWatch bool                   // exists watch on the service node
	watched    map[string]bool        // data watch on these children
	unread     map[string]*unreadable // children that could not be read

	pmu     sync.Mutex
	pending changes
	wake    chan struct{}

	// Equal metadata maps, shared by the entries. Entries are replaced,
	// never changed, so pubInst points into them.
	meta metaCache

	watchEvents, fetches, malformed, unreadable, publishes, bulkReads atomic.Int64
	mode                                                              atomic.Int32 // WatchMode in use
}

// entry is a stored node. What a publish reads of every entry (key, pub,
// ok, out) comes first, in one cache line: a publish of 10,000 entries
// that reached past inst for them missed the cache at each.
type entry struct {
	key     pubKey // pub's first bytes, for sortByPub: set with pub, by setPub
	pub     string // what is published for inst, rendered once
	ok      bool   // decoded; a malformed node is kept out of the set
	out     bool   // inst is OUT_OF_SERVICE: read once, not per publish
	version int32  // data version read
	czxid   int64  // of the node read, malformed or not
	inst    Instance
}

// setPub sets what e publishes, and its sort key with it.
func (e *entry) setPub(pub string) {
	e.pub, e.key = pub, keyOf(pub)
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
		watch: defaultWatchMode,
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
		watched: map[string]bool{}, unread: map[string]*unreadable{},
		subs:    map[chan<- kitsd.Event]*subscriber{},
		first:   make(chan struct{}),
		loaded:  make(chan struct{}),
		wake:    make(chan struct{}, 1),
		pending: changes{full: true},
	}
	in.logger = o.logger.With("component", "sd.instancer", "service", service)
	in.ctx, in.cancel = context.WithCancel(context.Background())
	in.mode.Store(int32(o.watch))
	in.wg.Add(1)
	go in.feed()
	return in, nil
}

// NewInstancerContext is NewInstancer that waits until the service was
// read from ZooKeeper without error, or ctx ends, or the Client is closed,
// or no server gave a session within the Client's connect timeout. Then it stops the
// Instancer and returns the last read error (a missing service node is not
// an error: it is an empty service), so that a failed first load is not
// mistaken for an empty, healthy service.
func NewInstancerContext(ctx context.Context, c *Client, service string, opts ...InstancerOption) (*Instancer, error) {
	in, err := newInstancer(c, service, opts)
	if err != nil {
		return nil, err
	}
	// An ensemble that never answered fails the load after the connect
	// timeout, as it fails every call.
	never := time.NewTimer(c.opts.connectTimeout)
	defer never.Stop()
	var noServer error
	for waiting := true; waiting; {
		// Every server refusing the client's TLS or SASL settings ends the
		// load at once, as it ends every call (Client.awaitSettled).
		refusals := c.sec.Refusals()
		if err := c.refusedByAll(); err != nil {
			in.Stop()
			return nil, fmt.Errorf("sd: first load of service %q from %s: %w", service, in.dir, err)
		}
		select {
		case <-in.loaded:
			return in, nil
		case <-refusals:
		case <-ctx.Done():
			waiting = false
		case <-c.Done():
			waiting = false
		case <-never.C:
			if !c.hadSession() {
				noServer = c.errNoServer()
				waiting = false
			}
		}
	}
	return nil, in.firstLoadFailed(ctx, service, noServer)
}

// firstLoadFailed stops an Instancer whose first load did not succeed and
// says why: its own error, or else no server, the ctx, or the Client's close.
func (in *Instancer) firstLoadFailed(ctx context.Context, service string, noServer error) error {
	err := in.Err()
	in.Stop()
	if err == nil || errors.Is(err, ErrNotLoaded) || errors.Is(err, ErrDisconnected) {
		err = cmp.Or(noServer, ctx.Err(), error(ErrClosed))
	}
	return fmt.Errorf("sd: first load of service %q from %s: %w", service, in.dir, err)
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

// Stop implements sd.Instancer: it stops watching and waits for every
// goroutine of the Instancer. It is idempotent.
func (in *Instancer) Stop() {
	in.cancel()
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
		Malformed: in.malformed.Load(), Unreadable: in.unreadable.Load(), Publishes: in.publishes.Load(),
		BulkReads: in.bulkReads.Load(), WatchMode: WatchMode(in.mode.Load()),
	}
}
