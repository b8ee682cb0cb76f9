package sd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/zkconn"
	"github.com/gracekit/gracekit/internal/zkwire"
)

// Catalog follows every service under the base path with one persistent
// recursive watch (ZooKeeper 3.6+) on the base path, for a gateway that
// routes every service, as Spring Cloud Gateway's discovery locator does: a
// consumer of S services then holds one watch, not S. Its Instancers are
// fed by that watch and hold none of their own.
//
// Services come and go: a service node appears with its first instance and
// Curator's container parents are reaped once empty; Services follows
// both. When the server refuses addWatch (or WithWatchMode(WatchPerNode)
// is given), the Catalog lists the services with a children watch and its
// Instancers watch per node.
type Catalog struct {
	c    *Client
	base string // server path
	opts []InstancerOption
	o    instancerOptions
	ws   *zkconn.WatchSession // nil: per-node
	mode atomic.Int32

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	loaded chan struct{} // closed at the first listing

	mu       sync.Mutex
	services map[string]bool
	changed  chan struct{} // closed at the next change of services
	made     map[*Instancer]bool
	stopped  bool
}

// NewCatalog starts following the services under the base path (see
// BasePath); opts are given to every Instancer the Catalog makes. It
// returns once the services were first listed or the session timeout
// passed, and keeps trying in the background either way.
func NewCatalog(c *Client, opts ...InstancerOption) (*Catalog, error) {
	if c == nil {
		return nil, &ConfigError{"client", "nil", "a *sd.Client from NewClient"}
	}
	o := instancerOptions{basePath: DefaultBasePath, watch: defaultWatchMode}
	for _, opt := range opts {
		if err := opt.applyInstancer(&o); err != nil {
			return nil, err
		}
	}
	if o.logger == nil {
		o.logger = c.logger
	}
	k := &Catalog{
		c: c, base: c.full(o.basePath), opts: slices.Clone(opts), o: o,
		done: make(chan struct{}), loaded: make(chan struct{}),
		services: map[string]bool{}, changed: make(chan struct{}), made: map[*Instancer]bool{},
	}
	k.mode.Store(int32(o.watch))
	k.ctx, k.cancel = context.WithCancel(context.Background())
	if o.watch == WatchRecursive {
		k.ws = c.watches()
	}
	go k.run()
	t := time.NewTimer(c.SessionTimeout())
	defer t.Stop()
	select {
	case <-k.loaded:
	case <-t.C:
	}
	return k, nil
}

// Services returns the services under the base path, sorted, and a
// channel closed at their next change.
func (k *Catalog) Services() ([]string, <-chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Sorted(maps.Keys(k.services)), k.changed
}

// Mode is how the Catalog watches now.
func (k *Catalog) Mode() WatchMode { return WatchMode(k.mode.Load()) }

// Instancer returns a new Instancer of service fed by the Catalog's watch,
// with the Catalog's options and then opts. The caller may Stop it; Stop of
// the Catalog stops it too.
func (k *Catalog) Instancer(service string, opts ...InstancerOption) (*Instancer, error) {
	all := append(slices.Clone(k.opts), opts...)
	k.mu.Lock()
	stopped := k.stopped
	k.mu.Unlock()
	if stopped {
		return nil, ErrClosed
	}
	in, err := NewInstancer(k.c, service, all...)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		in.Stop()
		return nil, ErrClosed
	}
	for m := range k.made { // forget the ones their owners stopped
		if m.ctx.Err() != nil {
			delete(k.made, m)
		}
	}
	k.made[in] = true
	k.mu.Unlock()
	return in, nil
}

// Stop stops every Instancer the Catalog made and the watch, and waits
// for their goroutines. It is idempotent.
func (k *Catalog) Stop() {
	k.mu.Lock()
	k.stopped = true
	made := slices.Collect(maps.Keys(k.made))
	k.mu.Unlock()
	for _, in := range made {
		in.Stop()
	}
	k.cancel()
	<-k.done
}

func (k *Catalog) set(names map[string]bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	select {
	case <-k.loaded:
	default:
		close(k.loaded)
	}
	if maps.Equal(names, k.services) {
		return
	}
	k.services = names
	close(k.changed)
	k.changed = make(chan struct{})
}

func (k *Catalog) run() {
	defer close(k.done)
	if k.ws != nil {
		if !k.runRecursive() {
			return
		}
		// Its Instancers fall back by themselves, told by the same session.
	}
	k.mode.Store(int32(WatchPerNode))
	k.runPerNode()
}

// runRecursive follows the service nodes, children of the base path, from
// the watch session until Stop (false) or a refusal (true).
func (k *Catalog) runRecursive() (refused bool) {
	f := zkconn.NewFeed()
	unsub := k.ws.Subscribe(k.base, f)
	defer unsub()
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval = 50*time.Millisecond, 5*time.Second
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	var readZxid int64   // what the set was read at, at least (as Instancer.behind)
	var readOrder uint64 // the watch session's zxid order readZxid is in
	readAt := func(w zkconn.Work) {
		if readOrder != w.Lineage {
			readZxid, readOrder = 0, w.Lineage // a new session, from zxid 0 (lost.go)
		}
		readZxid = max(readZxid, w.Conn.LastZxid())
	}
	for {
		select {
		case <-k.ctx.Done():
			return false
		case <-f.Wake():
		case <-retry.C:
		}
		w := f.Take()
		if w.Refused != nil {
			return true
		}
		if w.Conn == nil {
			continue
		}
		if w.Full {
			names, zxid, err := listOver(k.ctx, w.Conn, w.List, k.base)
			if err == nil && zxid > 0 && zxid < readZxid && readOrder == w.Lineage {
				k.o.logger.Warn("a server answered from behind the services already published; not publishing them, trying another server",
					"server", w.Conn.Addr(), "zxid", fmt.Sprintf("%#x", zxid), "published_zxid", fmt.Sprintf("%#x", readZxid))
				w.Conn.Drop() // the watch session resumes on the next server
				continue
			}
			if err != nil {
				if w.Conn.Err() == nil && k.ctx.Err() == nil {
					k.o.logger.Warn("listing the services failed; retrying", "path", k.base, "err", err)
					f.PutBack(w)
					retry.Reset(bo.NextBackOff())
				}
				continue
			}
			bo.Reset()
			set := map[string]bool{}
			for _, n := range names {
				set[n] = true
			}
			k.set(set)
			readAt(w)
			continue
		}
		k.mu.Lock()
		set := maps.Clone(k.services)
		k.mu.Unlock()
		for n, op := range w.Ops {
			if op.Del {
				delete(set, n)
			} else {
				set[n] = true
			}
		}
		k.set(set)
		readAt(w)
	}
}

// listOver lists the children of p over conn, or waits for list when
// it was sent already; a missing p has none. zxid is the server's when
// it answered.
func listOver(ctx context.Context, conn *zkwire.Conn, list *zkwire.Call, p string) (names []string, zxid int64, err error) {
	if list == nil {
		list = conn.Send(zkwire.OpGetChildren, zkwire.GetChildrenBody(p))
	}
	r, err := list.Wait(ctx)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, r.Header.Zxid, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("sd: list %s: %w", p, err)
	}
	names, err = zkwire.ParseChildren(r.Body)
	return names, r.Header.Zxid, err
}

// runPerNode follows the services with a children watch on the base path
// (an exists watch while it is missing) over the Client's session.
func (k *Catalog) runPerNode() {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval = 50*time.Millisecond, 5*time.Second
	for {
		// As every call of ours (see Client.awaitSettled).
		if k.c.awaitSettled(k.ctx) != nil {
			return
		}
		names, _, ch, err := k.c.zk().ChildrenW(k.base)
		if errors.Is(err, zk.ErrNoNode) {
			var ok bool
			ok, _, ch, err = k.c.zk().ExistsW(k.base)
			if err == nil && ok {
				continue // created in between
			}
		}
		var t *time.Timer
		var wait <-chan time.Time
		if err != nil {
			t = time.NewTimer(bo.NextBackOff())
			wait = t.C
		} else {
			bo.Reset()
			set := map[string]bool{}
			for _, n := range names {
				set[path.Base(n)] = true
			}
			k.set(set)
		}
		select {
		case <-k.ctx.Done():
		case <-ch:
		case <-wait:
		}
		if t != nil {
			t.Stop()
		}
		if k.ctx.Err() != nil {
			return
		}
	}
}
