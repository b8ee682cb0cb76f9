package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/zkconn"
	"github.com/gracekit/gracekit/sd"
)

// The registry is read with go-zookeeper directly, not through sd.Client:
// an operator's tool needs what a service never does and sd keeps to
// itself, the nodes' Stat (ephemeralOwner, ctime), their ACLs, the list of
// services, and the raw bytes of nodes that do not decode. sd still parses
// the connect string and decodes the nodes, so the tool reads exactly what
// the library reads.

// dialer connects to servers; tests replace it to record or cut sessions.
var dialer zk.Dialer = defaultDialer

var defaultDialer zk.Dialer = net.DialTimeout

// errSessionLost ends a one-shot command whose session dropped mid-way:
// go-zookeeper would otherwise hold its requests until a server is back.
var errSessionLost = errors.New("gracekit: lost the ZooKeeper session while reading")

// registry is one ZooKeeper session on the registry.
type registry struct {
	conn    *zk.Conn
	chroot  string
	base    string // the base path, outside the chroot
	codec   sd.Codec
	socks   *sockets
	drained chan struct{}
	stopCtx func() bool

	mu      sync.Mutex
	onEvent func(zk.Event) // watch events and session changes, for watch
}

// dial connects and waits for a session, within cfg.timeout and ctx. The
// returned ctx ends with ctx, and also when the session is lost if
// oneShot is set; ending it closes the connection, which fails the
// requests in flight, since go-zookeeper's calls take no ctx.
func dial(ctx context.Context, cfg config, oneShot bool) (*registry, context.Context, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	codec := cfg.codec
	if codec == nil {
		codec = sd.CuratorCodec{}
	}
	sec := cfg.sec
	if sec == nil {
		sec, _ = zkconn.New(zkconn.Security{}) // plaintext cannot fail
	}
	// TLS and SASL, and the zxid fence, as sd's Client dials: the fence
	// hands go-zookeeper zeroed reply zxids, so its watch re-send after a
	// reconnect races with nothing (go-zookeeper/zk#35), and a reconnect
	// never resumes on a server behind what the command read.
	fence := &zkconn.Fence{Zxid: new(atomic.Int64), ReplyZxid: new(atomic.Int64), Timeout: new(atomic.Int64), Refused: new(atomic.Pointer[string]),
		Lost: func() bool { return false }, HandshakeWait: func() time.Duration { return cfg.timeout }}
	d := zk.Dialer(zkconn.Dialer(ctx, zkconn.Options{Dial: zkconn.DialFunc(dialer), Layer: sec, Fence: fence}))
	r := &registry{chroot: cfg.chroot, base: cfg.basePath, codec: codec, socks: newSockets(d, cfg.servers), drained: make(chan struct{})}
	ready := make(chan struct{})
	authFailed := make(chan struct{})
	var readyOnce, failOnce sync.Once
	var had atomic.Bool // go-zookeeper calls back from more than one goroutine
	cb := func(ev zk.Event) {
		if ev.Type == zk.EventSession {
			switch ev.State {
			case zk.StateHasSession:
				had.Store(true)
				readyOnce.Do(func() { close(ready) })
			case zk.StateAuthFailed:
				failOnce.Do(func() { close(authFailed) })
			case zk.StateDisconnected, zk.StateExpired:
				if had.Load() && oneShot {
					if f := sec.Failure(); f != nil {
						cancel(fmt.Errorf("gracekit: %w", f)) // a server that wants SASL ended it
					} else {
						cancel(errSessionLost)
					}
				}
			}
		}
		r.mu.Lock()
		f := r.onEvent
		r.mu.Unlock()
		if f != nil {
			f(ev)
		}
	}
	conn, events, err := zk.Connect(cfg.servers, cfg.timeout,
		zk.WithLogger(silent{}), zk.WithLogInfo(false), zk.WithDialer(r.socks.dialTimeout), zk.WithEventCallback(cb))
	if err != nil {
		cancel(nil)
		return nil, nil, fmt.Errorf("gracekit: connect %v: %w", cfg.servers, err)
	}
	r.conn = conn
	// The callback gets every event; drain the channel too, and learn from
	// its close that go-zookeeper's goroutines ended.
	go func() {
		for range events {
		}
		close(r.drained)
	}()
	r.stopCtx = context.AfterFunc(ctx, conn.Close)

	// AddAuth waits for its reply, so for a session; it returns at the
	// latest when the connection is closed.
	authDone := make(chan error, 1)
	authPending := cfg.user != ""
	if authPending {
		go func() { authDone <- conn.AddAuth("digest", []byte(cfg.user+":"+cfg.password)) }()
	}
	t := time.NewTimer(cfg.timeout)
	defer t.Stop()
	for got := false; err == nil && (!got || authPending); {
		refusals := sec.Refusals()
		if f := sec.Failure(); f != nil && sec.AllHeld(r.socks.wanted()) {
			// Every server refused a setting: waiting will not change it.
			err = fmt.Errorf("gracekit: %w", f)
			break
		}
		select {
		case <-refusals:
		case <-ready:
			got, ready = true, nil
		case aerr := <-authDone:
			authPending = false
			if aerr != nil {
				err = fmt.Errorf("gracekit: digest auth as %q: %w", cfg.user, aerr)
			}
		case <-authFailed:
			err = fmt.Errorf("gracekit: ZooKeeper refused the credentials of %q", cfg.user)
		case <-r.socks.allRefused:
			err = fmt.Errorf("gracekit: every ZooKeeper server refused the connection (tried %v): check -zk / %s and that the ensemble is up",
				r.socks.tried(), envZKServers)
		case <-t.C:
			err = fmt.Errorf("gracekit: no ZooKeeper server of %v gave a session within %v: check -zk / %s and that the ensemble is up",
				cfg.servers, cfg.timeout, envZKServers)
		case <-ctx.Done():
			err = fmt.Errorf("gracekit: connect %v: %w", cfg.servers, context.Cause(ctx))
		}
	}
	if err == nil {
		return r, ctx, nil
	}
	r.close()
	if authPending {
		<-authDone
	}
	cancel(nil)
	return nil, nil, err
}

// closeWait bounds how long close waits for go-zookeeper to end: so that
// -timeout bounds every exit, within a second.
const closeWait = 500 * time.Millisecond

// closing holds every go-zookeeper Close that close stopped waiting for.
// Each ends within a second; a process exits without them, and the tests,
// which run the CLI in-process, wait for them before their leak check.
var closing sync.WaitGroup

// close ends the session and waits, at most closeWait, for go-zookeeper's
// goroutines. go-zookeeper's Close waits a second for a reply that a
// frozen server never sends, and its handshake reads for ten times the
// session timeout: so the sockets are closed under it, and Close is not
// waited for past closeWait.
func (r *registry) close() {
	r.stopCtx()
	closed := make(chan struct{})
	closing.Go(func() { r.conn.Close(); close(closed) })
	r.socks.closeAll()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	for _, c := range []chan struct{}{r.drained, closed} {
		select {
		case <-c:
		case <-t.C:
			return
		}
	}
}

// sockets is go-zookeeper's dialer with a record of what it dialled, so
// that close can cut a connection go-zookeeper itself would wait on, and
// of which servers refused the connection: when every one did, nobody is
// listening and waiting for the timeout helps no one (go-zookeeper keeps
// cycling through them).
type sockets struct {
	dial zk.Dialer

	mu         sync.Mutex
	conns      []net.Conn
	closed     bool
	want       map[string]bool // the addresses go-zookeeper dials, as it resolves them
	refused    map[string]bool // refused since the last other outcome
	allRefused chan struct{}   // closed once every address in want refused
}

func newSockets(dial zk.Dialer, servers []string) *sockets {
	s := &sockets{dial: dial, want: map[string]bool{}, refused: map[string]bool{}, allRefused: make(chan struct{})}
	for _, srv := range servers {
		host, port, err := net.SplitHostPort(srv)
		if err != nil {
			continue
		}
		// go-zookeeper's DNSHostProvider dials every address of every host.
		ips, err := net.LookupIP(host)
		if err != nil {
			continue
		}
		for _, ip := range ips {
			s.want[net.JoinHostPort(ip.String(), port)] = true
		}
	}
	return s
}

// wanted lists the addresses go-zookeeper dials.
func (s *sockets) wanted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.want))
	for a := range s.want {
		out = append(out, a)
	}
	return out
}

// tried lists the addresses that refused, sorted.
func (s *sockets) tried() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.refused))
	for a := range s.refused {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

func (s *sockets) note(addr string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		clear(s.refused)
		return
	}
	s.refused[addr] = true
	if len(s.want) == 0 {
		return
	}
	for a := range s.want {
		if !s.refused[a] {
			return
		}
	}
	select {
	case <-s.allRefused:
	default:
		close(s.allRefused)
	}
}

func (s *sockets) dialTimeout(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := s.dial(network, addr, timeout)
	s.note(addr, err)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	s.conns = append(s.conns, c)
	return c, nil
}

func (s *sockets) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
}

// checkBase says, as a usage error, that the chroot or the base path does
// not exist: a typo would otherwise read as an empty, clean registry.
func (r *registry) checkBase(ctx context.Context) error {
	if err := r.checkChroot(ctx); err != nil {
		return err
	}
	ok, _, err := r.conn.Exists(r.full(r.base))
	if err != nil {
		return wrap(ctx, "look up", r.base, err)
	}
	if !ok {
		return &usageError{fmt.Sprintf("the base path %s does not exist%s: check -base-path / %s (nothing was ever registered there)", r.base, r.inChroot(), envBasePath)}
	}
	return nil
}

// checkChroot says, as a usage error, that the connect string's chroot
// does not exist.
func (r *registry) checkChroot(ctx context.Context) error {
	if r.chroot != "" {
		ok, _, err := r.conn.Exists(r.chroot)
		if err != nil {
			return wrap(ctx, "look up the chroot", r.chroot, err)
		}
		if !ok {
			return &usageError{fmt.Sprintf("the chroot %s of -zk / %s does not exist on the server: check the connect string", r.chroot, envZKServers)}
		}
	}
	return nil
}

func (r *registry) inChroot() string {
	if r.chroot == "" {
		return ""
	}
	return " under the chroot " + r.chroot
}

// setOnEvent sets the function that gets every event from now on. It is
// called from go-zookeeper's goroutine and must not block.
func (r *registry) setOnEvent(f func(zk.Event)) {
	r.mu.Lock()
	r.onEvent = f
	r.mu.Unlock()
}

// full maps a path inside the chroot to the server's path.
func (r *registry) full(p string) string {
	if r.chroot == "" {
		return p
	}
	if p == "/" {
		return r.chroot
	}
	return r.chroot + p
}

func (r *registry) serviceDir(service string) string { return path.Join(r.base, service) }

// wrap names the path of a failed call, and the lost session or the
// interrupt when that is what failed it.
func wrap(ctx context.Context, op, p string, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		return fmt.Errorf("gracekit: %s %s: %w", op, p, cause)
	}
	return fmt.Errorf("gracekit: %s %s: %w", op, p, err)
}

// nodeError tells whether err is about one node (its ACL, a malformed
// reply) rather than the connection: such a node is reported, and the
// command goes on.
func nodeError(err error) bool {
	return err != nil && !errors.Is(err, zk.ErrConnectionClosed) && !errors.Is(err, zk.ErrNoServer) &&
		!errors.Is(err, zk.ErrSessionExpired) && !errors.Is(err, zk.ErrClosing)
}

// serviceScan is what one service's node and children hold.
type serviceScan struct {
	name    string
	path    string
	exists  bool
	listErr error // the children could not be listed (a node error)
	acl     []zk.ACL
	aclErr  error
	names   []string // the children, sorted
	nodes   []nodeScan
}

// nodeScan is one child of a service node.
type nodeScan struct {
	name    string
	path    string
	stat    *zk.Stat
	data    []byte
	readErr error // a node error: an ACL the session lacks, say
	inst    sd.Instance
	decErr  error // the data is not a Curator instance
}

// scanFetches bounds the reads in flight: go-zookeeper pipelines them over
// the one connection, which takes a large service from one round trip per
// node to a few.
const scanFetches = 32

// listServices returns the services under the base path, sorted; none
// when the base path does not exist.
func (r *registry) listServices(ctx context.Context) ([]string, error) {
	names, _, err := r.conn.Children(r.full(r.base))
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap(ctx, "list", r.base, err)
	}
	slices.Sort(names)
	return names, nil
}

// scanService reads a service's children and each child's data and Stat,
// and its ACL when acl is set. Children gone between the list and the read
// are left out. Only a connection error is returned.
func (r *registry) scanService(ctx context.Context, service string, acl bool) (serviceScan, error) {
	s := serviceScan{name: service, path: r.serviceDir(service)}
	full := r.full(s.path)
	names, _, err := r.conn.Children(full)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return s, nil
	case nodeError(err) && ctx.Err() == nil:
		s.exists, s.listErr = true, err
	case err != nil:
		return s, wrap(ctx, "list", s.path, err)
	default:
		s.exists = true
	}
	if acl {
		s.acl, _, s.aclErr = r.conn.GetACL(full)
		if errors.Is(s.aclErr, zk.ErrNoNode) {
			return serviceScan{name: service, path: s.path}, nil
		}
		if s.aclErr != nil && (!nodeError(s.aclErr) || ctx.Err() != nil) {
			return s, wrap(ctx, "read the ACL of", s.path, s.aclErr)
		}
	}
	slices.Sort(names)
	s.names = names
	nodes := make([]nodeScan, len(names))
	keep := make([]bool, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, scanFetches)
	var wg sync.WaitGroup
	for i, name := range names {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			n := nodeScan{name: name, path: path.Join(s.path, name)}
			n.data, n.stat, n.readErr = r.conn.Get(r.full(n.path))
			switch {
			case errors.Is(n.readErr, zk.ErrNoNode):
				return // gone meanwhile: churn, not a finding
			case n.readErr != nil && (!nodeError(n.readErr) || ctx.Err() != nil):
				errs[i] = wrap(ctx, "read", n.path, n.readErr)
				return
			case n.readErr == nil:
				n.inst, n.decErr = r.codec.Decode(service, name, n.data)
			default: // exists needs no permission: the Stat says who owns it
				_, n.stat, _ = r.conn.Exists(r.full(n.path))
			}
			nodes[i], keep[i] = n, true
		}()
	}
	wg.Wait()
	if err := firstErr(errs); err != nil {
		return s, err
	}
	for i := range nodes {
		if keep[i] {
			s.nodes = append(s.nodes, nodes[i])
		}
	}
	return s, nil
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// scan reads the services named, or every service when none is. A named
// service without a node is a noServiceError: a typo would otherwise read
// as a clean, empty service.
func (r *registry) scan(ctx context.Context, services []string, acl bool) ([]serviceScan, error) {
	if err := r.checkBase(ctx); err != nil {
		return nil, err
	}
	named := len(services) > 0
	if !named {
		var err error
		if services, err = r.listServices(ctx); err != nil {
			return nil, err
		}
	}
	out := make([]serviceScan, 0, len(services))
	for _, svc := range services {
		s, err := r.scanService(ctx, svc, acl)
		if err != nil {
			return nil, err
		}
		if named && !s.exists {
			return nil, r.noService(ctx, svc)
		}
		out = append(out, s)
	}
	return out, nil
}

// noServiceError is a named service that has no node under the base path.
// It exits exitNoService, not exitUsage: the command line was right, the
// registry holds no such service (or no longer: Curator's container
// parents go with their last instance).
type noServiceError struct {
	service, base, chroot string
	there                 []string // the services that do exist, sorted
	listErr               error    // why they could not be listed (the base path's ACL)
	hint                  string   // what else to do, for the command at hand
}

// noServiceListed bounds the services the error names: a registry of
// thousands would bury the message.
const noServiceListed = 20

func (e *noServiceError) Error() string {
	where := e.base
	if e.chroot != "" {
		where += " (chroot " + e.chroot + ")"
	}
	var there string
	switch n := len(e.there); {
	case e.listErr != nil:
		there = "the services there cannot be listed: " + e.listErr.Error()
	case n == 0:
		there = "no services there"
	case n > noServiceListed:
		there = fmt.Sprintf("services there: %s and %d more; gracekit ls lists them", strings.Join(e.there[:noServiceListed], ", "), n-noServiceListed)
	default:
		there = "services there: " + strings.Join(e.there, ", ")
	}
	msg := fmt.Sprintf("gracekit: no service %q under %s (%s)", e.service, where, there)
	if e.hint != "" {
		msg += ": " + e.hint
	}
	return msg
}

// noService is the noServiceError for service, with the services that
// exist. A base path the session may not list still gives it, saying so;
// a lost connection is the error instead.
func (r *registry) noService(ctx context.Context, service string) error {
	e := &noServiceError{service: service, base: r.base, chroot: r.chroot}
	names, _, err := r.conn.Children(r.full(r.base))
	switch {
	case err == nil:
		slices.Sort(names)
		e.there = names
	case errors.Is(err, zk.ErrNoNode): // went meanwhile: none there
	case nodeError(err) && ctx.Err() == nil:
		e.listErr = err
	default:
		return wrap(ctx, "list", r.base, err)
	}
	return e
}

// checkService returns a noServiceError when service has no node.
func (r *registry) checkService(ctx context.Context, service string) error {
	p := r.serviceDir(service)
	ok, _, err := r.conn.Exists(r.full(p))
	if err != nil {
		return wrap(ctx, "look up", p, err)
	}
	if !ok {
		return r.noService(ctx, service)
	}
	return nil
}

// silent is a go-zookeeper logger that prints nothing: the tool reports
// what matters itself.
type silent struct{}

func (silent) Printf(string, ...any) {}
