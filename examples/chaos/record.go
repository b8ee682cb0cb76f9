package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path"
	"slices"
	"sort"
	"sync"
	"time"

	kitsd "github.com/go-kit/kit/sd"
	"github.com/go-zookeeper/zk"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/examples/internal/history"
	"github.com/gracekit/gracekit/grpcresolver"
	"github.com/gracekit/gracekit/sd"
)

// truthRecorder records the registry's truth: every instance node of the
// services under base, with its czxid, data version and status, read on
// every watch that fires and every pollEvery besides. It reads through a
// session of its own, straight to the ensemble. What it could not read
// (ZooKeeper down, its member restarting) is a gap, and so is a change it
// can tell it missed: a node that came and went between two reads (the
// service's child version, which ZooKeeper moves on every create and
// delete, moved more than the changes it saw), a node changed twice
// between them (its data version moved by more than one), or a new node
// already changed.
type truthRecorder struct {
	conn     *zk.Conn
	dial     zk.Dialer // nil: go-zookeeper's own; TLS with -zk-tls
	base     string
	services []string

	wake chan struct{}
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	changes  []history.Change
	gaps     []history.Gap
	known    map[string]node      // by path
	parents  map[string]container // by service, as of the last read
	armed    map[string]bool      // watches set, by path and kind
	lastRead time.Time            // end of the last complete read
	blind    bool                 // a read failed since lastRead
	running  bool                 // set before run starts: Close waits for it
}

// node is one instance node as last read.
type node struct {
	czxid, mzxid int64
	ctime, mtime time.Time // ZooKeeper's stamps of the creation and the last write
	version      int32
	service, id  string
	addr         string
	up           bool
	drained      bool // an operator's drain is on it (sd.MetadataDrainedBy)
	owner        int64
	registered   time.Time // the registration time the node names
}

// container is a service's parent node as last read.
type container struct {
	czxid    int64
	cversion int32 // child creations and deletions since czxid
}

const pollEvery = 200 * time.Millisecond

func newTruthRecorder(servers []string, dial zk.Dialer, base string, services []string) (*truthRecorder, error) {
	r, err := dialTruth(servers, dial, base, services)
	if err != nil {
		return nil, err
	}
	r.read() // the first read, before anything happens
	r.running = true
	go r.run()
	return r, nil
}

// dialTruth returns a recorder that reads only when read is called, until
// run starts.
func dialTruth(servers []string, dial zk.Dialer, base string, services []string) (*truthRecorder, error) {
	conn, events, err := connectZK(servers, dial)
	if err != nil {
		return nil, err
	}
	r := &truthRecorder{conn: conn, dial: dial, base: base, services: services, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), known: map[string]node{}, parents: map[string]container{}, armed: map[string]bool{}}
	go func() { // a full channel drops events: keep draining
		for range events {
		}
	}()
	return r, nil
}

// holds tells whether the last read saw the node at p, and whether UP.
func (r *truthRecorder) holds(p string) (held, up bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, ok := r.known[p]
	return ok, n.up
}

func (r *truthRecorder) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *truthRecorder) run() {
	defer close(r.done)
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-r.wake:
		case <-t.C:
		}
		r.read()
	}
}

// arm forwards a watch's firing to a read.
func (r *truthRecorder) arm(key string, ch <-chan zk.Event) {
	go func() {
		select {
		case <-ch:
		case <-r.stop:
		}
		r.mu.Lock()
		delete(r.armed, key)
		r.mu.Unlock()
		r.poke()
	}()
}

func (r *truthRecorder) isArmed(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.armed[key] {
		return true
	}
	r.armed[key] = true
	return false
}

// markBlind notes a read that failed: a gap, from the last complete read
// to the next.
func (r *truthRecorder) markBlind() {
	r.mu.Lock()
	r.blind = true
	r.mu.Unlock()
}

// read reads every service and notes what changed since the last read.
func (r *truthRecorder) read() {
	start := time.Now()
	seen := map[string]node{}
	parents := map[string]container{}
	// ZooKeeper's reads are sequentially consistent, not linearizable: a
	// member may answer from behind what another member told a consumer
	// (seen after a whole-ensemble restart: the truth read back nodes the
	// consumers had seen deleted 6 s before). A sync first brings the
	// member up to the leader, so the truth is never behind a consumer.
	r.mu.Lock()
	conn := r.conn // renew may replace it
	r.mu.Unlock()
	if _, err := conn.Sync("/"); err != nil {
		r.markBlind()
		return
	}
	for _, svc := range r.services {
		if err := r.readService(conn, svc, seen, parents); err != nil {
			r.markBlind()
			return
		}
	}
	at := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.blind && !r.lastRead.IsZero() {
		r.gaps = append(r.gaps, history.Gap{From: r.lastRead, To: start})
	}
	r.blind = false
	var gone, came []history.Change
	for p, old := range r.known {
		if n, ok := seen[p]; !ok || n.czxid != old.czxid {
			gone = append(gone, history.Change{At: at, Kind: history.Deleted, Key: history.Key{Path: p, Czxid: old.czxid},
				Service: old.service, ID: old.id, Addr: old.addr, Owner: old.owner})
		}
	}
	for p, n := range seen {
		old, ok := r.known[p]
		switch {
		case !ok || old.czxid != n.czxid:
			came = append(came, history.Change{At: changeTime(n.ctime, r.lastRead, at), Kind: history.Created, Key: history.Key{Path: p, Czxid: n.czxid}, Zxid: n.czxid,
				Service: n.service, ID: n.id, Addr: n.addr, Up: n.up, Drained: n.drained, Owner: n.owner, Registered: n.registered})
		case old.version != n.version, old.drained != n.drained:
			came = append(came, history.Change{At: changeTime(n.mtime, r.lastRead, at), Kind: history.Changed, Key: history.Key{Path: p, Czxid: n.czxid}, Zxid: n.mzxid,
				Service: n.service, ID: n.id, Addr: n.addr, Up: n.up, Drained: n.drained, Owner: n.owner})
		}
	}
	// Deletions first (a path deleted and created again in one read),
	// then the rest in zxid order.
	sort.Slice(gone, func(i, j int) bool { return gone[i].Key.Czxid < gone[j].Key.Czxid })
	sort.Slice(came, func(i, j int) bool { return came[i].Zxid < came[j].Zxid })
	if !r.lastRead.IsZero() && r.missed(gone, came, seen, parents) {
		r.gaps = append(r.gaps, history.Gap{From: r.lastRead, To: at})
	}
	r.changes = append(r.changes, gone...)
	r.changes = append(r.changes, came...)
	r.known, r.parents, r.lastRead = seen, parents, at
}

// changeTime times a change by ZooKeeper's own stamp of it (a node's
// ctime or mtime, one clock with ours on this machine), not by when this
// read saw it: a read after a gap sees changes a consumer may have
// published long before. The stamp is kept within (lastRead, at], the
// reads that bound when the change could have been made; a deletion has
// no stamp and stays at at.
func changeTime(stamp, lastRead, at time.Time) time.Time {
	switch {
	case stamp.IsZero() || stamp.After(at):
		return at
	case !lastRead.IsZero() && !stamp.After(lastRead):
		if next := lastRead.Add(time.Millisecond); next.Before(at) {
			return next
		}
		return at
	}
	return stamp
}

// missed tells whether ZooKeeper made changes since the last read that
// this read's changes do not account for.
func (r *truthRecorder) missed(gone, came []history.Change, seen map[string]node, parents map[string]container) bool {
	moves := map[string]int32{} // child creations and deletions seen, by service
	for _, c := range gone {
		moves[c.Service]++
	}
	for _, c := range came {
		if c.Kind == history.Created {
			moves[c.Service]++
		}
	}
	for svc, now := range parents {
		was := r.parents[svc]
		if was.czxid != now.czxid {
			was = container{czxid: now.czxid} // a new container counts from zero
		}
		if now.cversion-was.cversion > moves[svc] {
			return true
		}
	}
	for p, n := range seen {
		old, ok := r.known[p]
		switch {
		case ok && old.czxid == n.czxid && n.version-old.version > 1:
			return true // changed twice since the last read
		case (!ok || old.czxid != n.czxid) && n.version > 0:
			return true // created and changed since: its first state unseen
		}
	}
	return false
}

func (r *truthRecorder) readService(conn *zk.Conn, svc string, seen map[string]node, parents map[string]container) error {
	dir := path.Join(r.base, svc)
	var children []string
	var pst *zk.Stat
	var err error
	if r.isArmed("c" + dir) {
		children, pst, err = conn.Children(dir)
	} else {
		var ch <-chan zk.Event
		children, pst, ch, err = conn.ChildrenW(dir)
		if err == nil {
			r.arm("c"+dir, ch)
		} else {
			r.mu.Lock()
			delete(r.armed, "c"+dir)
			r.mu.Unlock()
		}
	}
	switch {
	case errors.Is(err, zk.ErrNoNode):
		// No instance yet (or the container went): watch for its parent,
		// once.
		if r.isArmed("e" + dir) {
			return nil
		}
		_, _, ch, err := conn.ExistsW(dir)
		if err != nil {
			r.mu.Lock()
			delete(r.armed, "e"+dir)
			r.mu.Unlock()
			return err
		}
		r.arm("e"+dir, ch)
		return nil
	case err != nil:
		return err
	}
	parents[svc] = container{czxid: pst.Czxid, cversion: pst.Cversion}
	for _, child := range children {
		p := dir + "/" + child
		var data []byte
		var st *zk.Stat
		if r.isArmed("d" + p) {
			data, st, err = conn.Get(p)
		} else {
			var ch <-chan zk.Event
			data, st, ch, err = conn.GetW(p)
			if err == nil {
				r.arm("d"+p, ch)
			} else {
				r.mu.Lock()
				delete(r.armed, "d"+p)
				r.mu.Unlock()
			}
		}
		if errors.Is(err, zk.ErrNoNode) {
			continue // gone between the listing and the read
		}
		if err != nil {
			return err
		}
		inst, err := sd.CuratorCodec{}.Decode(svc, child, data)
		if err != nil {
			continue // malformed: no consumer publishes it either
		}
		seen[p] = node{czxid: st.Czxid, mzxid: st.Mzxid, ctime: time.UnixMilli(st.Ctime), mtime: time.UnixMilli(st.Mtime), version: st.Version, service: svc, id: inst.ID,
			addr: inst.HostPort(), up: inst.Status() == sd.StatusUp, drained: inst.Metadata[sd.MetadataDrainedBy] != "", owner: st.EphemeralOwner,
			registered: inst.RegistrationTime}
	}
	return nil
}

// renew replaces the recorder's session with a new one: a go-zookeeper
// session, which sends the last zxid it saw and never gives up, is
// refused for ever by an ensemble restored from behind it. The reads
// between are a gap.
func (r *truthRecorder) renew(servers []string) error {
	conn, events, err := connectZK(servers, r.dial)
	if err != nil {
		return err
	}
	go func() { // a full channel drops events: keep draining
		for range events {
		}
	}()
	r.mu.Lock()
	old := r.conn
	r.conn, r.armed, r.blind = conn, map[string]bool{}, true
	r.mu.Unlock()
	old.Close()
	r.poke()
	return nil
}

// Close stops the recorder and returns what it recorded.
func (r *truthRecorder) Close() ([]history.Change, []history.Gap) {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	if r.running {
		<-r.done
	}
	r.mu.Lock()
	r.conn.Close()
	defer r.mu.Unlock()
	return slices.Clone(r.changes), slices.Clone(r.gaps)
}

// publishLog is where the consumer recorders note what they published.
type publishLog struct {
	mu   sync.Mutex
	pubs []history.Publish
}

func (l *publishLog) add(p history.Publish) {
	l.mu.Lock()
	l.pubs = append(l.pubs, p)
	l.mu.Unlock()
}

func (l *publishLog) all() []history.Publish {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.pubs)
}

// recorder is one consumer of the services whose publishes are recorded.
type recorder interface {
	Name() string
	Stop()
}

// instancerRecorder records what a gracekit sd.Instancer publishes to a
// registered channel (go-kit's sd.Event: host:port strings), one per
// service, over one sd.Client. With ignoreDeletes it is the deliberately
// broken consumer: it publishes every instance it ever saw.
type instancerRecorder struct {
	name    string
	client  *sd.Client
	catalog *sd.Catalog
	ins     []*sd.Instancer
	wg      sync.WaitGroup
	stopCh  chan struct{}
}

// newInstancerRecorder watches services through connect: with
// sd.Instancers of their own, or through one sd.Catalog (catalog).
func newInstancerRecorder(name, connect, base string, services []string, timeout time.Duration, catalog, ignoreDeletes bool, log *publishLog, sec ...sd.ClientOption) (*instancerRecorder, error) {
	c, err := sd.NewClient(connect, append(sec, sd.SessionTimeout(timeout))...)
	if err != nil {
		return nil, err
	}
	r := &instancerRecorder{name: name, client: c, stopCh: make(chan struct{})}
	if catalog {
		if r.catalog, err = sd.NewCatalog(c, sd.BasePath(base)); err != nil {
			c.Close()
			return nil, err
		}
	}
	for _, svc := range services {
		var in *sd.Instancer
		if catalog {
			in, err = r.catalog.Instancer(svc)
		} else {
			in, err = sd.NewInstancer(c, svc, sd.BasePath(base))
		}
		if err != nil {
			r.Stop()
			return nil, err
		}
		r.ins = append(r.ins, in)
		ch := make(chan kitsd.Event, 1)
		r.wg.Add(1)
		go r.follow(svc, in, ch, ignoreDeletes, log)
		in.Register(ch)
	}
	return r, nil
}

func (r *instancerRecorder) Name() string { return r.name }

func (r *instancerRecorder) follow(svc string, in *sd.Instancer, ch chan kitsd.Event, ignoreDeletes bool, log *publishLog) {
	defer r.wg.Done()
	ever := map[string]bool{}
	for {
		var ev kitsd.Event
		select {
		case ev = <-ch:
		case <-r.stopCh:
			in.Deregister(ch)
			return
		}
		p := history.Publish{At: time.Now(), Consumer: r.name, Service: svc}
		if ev.Err != nil {
			p.Err = ev.Err.Error()
		}
		addrs := ev.Instances
		if ignoreDeletes {
			for _, a := range addrs {
				ever[a] = true
			}
			addrs = sortedSet(ever)
		}
		// The event names addresses; the Instancer's records name the
		// registration (czxid) when they are still that set.
		byAddr := map[string]sd.Instance{}
		for _, inst := range in.Instances() {
			byAddr[inst.HostPort()] = inst
		}
		exact := len(byAddr) == len(addrs) && !ignoreDeletes
		for _, a := range addrs {
			if _, ok := byAddr[a]; !ok {
				exact = false
			}
		}
		for _, a := range addrs {
			m := history.Member{Addr: a}
			if exact {
				m.ID, m.Czxid = byAddr[a].ID, byAddr[a].Czxid
			}
			p.Members = append(p.Members, m)
		}
		log.add(p)
	}
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Stop stops following, the Instancers and the client.
func (r *instancerRecorder) Stop() {
	select {
	case <-r.stopCh:
		return
	default:
		close(r.stopCh)
	}
	r.wg.Wait()
	for _, in := range r.ins {
		in.Stop()
	}
	if r.catalog != nil {
		r.catalog.Stop()
	}
	r.client.Close()
}

// resolverRecorder records what grpcresolver pushes to a grpc-go
// ClientConn, one per service, over a consumer.Consumer.
type resolverRecorder struct {
	name string
	sess *sd.Session
	cons *consumer.Consumer
	rs   []resolver.Resolver
}

func newResolverRecorder(ctx context.Context, name, connect, base string, services []string, timeout time.Duration, log *publishLog, sec ...sd.ClientOption) (*resolverRecorder, error) {
	sess, err := sd.NewSession(connect, append(sec, sd.SessionTimeout(timeout))...)
	if err != nil {
		return nil, err
	}
	cons, err := consumer.New(sess, consumer.WithInstancerOptions(sd.BasePath(base)), consumer.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	if err := cons.Start(ctx); err != nil {
		return nil, err
	}
	r := &resolverRecorder{name: name, sess: sess, cons: cons}
	b, err := grpcresolver.NewBuilder(cons)
	if err != nil {
		r.Stop()
		return nil, err
	}
	for _, svc := range services {
		u, err := url.Parse(b.Scheme() + ":///" + svc)
		if err != nil {
			r.Stop()
			return nil, err
		}
		res, err := b.Build(resolver.Target{URL: *u}, &recordingConn{name: name, service: svc, log: log}, resolver.BuildOptions{})
		if err != nil {
			r.Stop()
			return nil, fmt.Errorf("grpcresolver %s: %w", svc, err)
		}
		r.rs = append(r.rs, res)
	}
	return r, nil
}

func (r *resolverRecorder) Name() string { return r.name }

func (r *resolverRecorder) Stop() {
	for _, res := range r.rs {
		res.Close()
	}
	r.rs = nil
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = r.cons.Stop(ctx)
	_ = r.sess.Stop(ctx)
}

// recordingConn is the grpc-go ClientConn a resolver pushes to: it notes
// every state, each address with the instance it carries.
type recordingConn struct {
	resolver.ClientConn // nil: a method not overridden is not expected
	name, service       string
	log                 *publishLog
}

func (c *recordingConn) UpdateState(s resolver.State) error {
	p := history.Publish{At: time.Now(), Consumer: c.name, Service: c.service}
	for _, a := range s.Addresses {
		m := history.Member{Addr: a.Addr}
		if inst, ok := grpcresolver.InstanceFromAddress(a); ok {
			m = history.Member{ID: inst.ID, Addr: inst.HostPort(), Czxid: inst.Czxid}
		}
		p.Members = append(p.Members, m)
	}
	c.log.add(p)
	return nil
}

// ReportError: the resolver keeps the last set it pushed; the error is
// noted as a publish of that set with the error, as an Instancer's is.
func (c *recordingConn) ReportError(err error) {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	for i := len(c.log.pubs) - 1; i >= 0; i-- {
		if p := c.log.pubs[i]; p.Consumer == c.name && p.Service == c.service {
			p.At, p.Err = time.Now(), err.Error()
			c.log.pubs = append(c.log.pubs, p)
			return
		}
	}
}

func (c *recordingConn) NewAddress([]resolver.Address) {}

func (c *recordingConn) ParseServiceConfig(string) *serviceconfig.ParseResult {
	return &serviceconfig.ParseResult{}
}
