package sd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/zkconn"
)

// Client defaults.
const (
	DefaultSessionTimeout = 10 * time.Second
	DefaultConnectTimeout = 10 * time.Second
	MinSessionTimeout     = 200 * time.Millisecond
	MaxSessionTimeout     = 5 * time.Minute
)

// ErrClosed is returned by a Client, Registrar or Instancer used after Close or Stop.
var ErrClosed = errors.New("sd: closed")

// ConfigError names a configuration value that is out of range.
type ConfigError struct {
	Field string // e.g. "connect string", "session timeout"
	Value string
	Want  string // what is allowed
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("sd: invalid %s %q (%s)", e.Field, e.Value, e.Want)
}

// State is the state of a Client's connection and session.
type State int

// Client states.
const (
	StateUnknown      State = iota
	StateDisconnected       // no connection; the session may still be alive
	StateConnecting         // trying a server
	StateConnected          // connected, before the session is confirmed
	StateHasSession         // connected with a session: calls go through
	StateExpired            // the session ended: its ephemeral nodes and watches are gone
	StateAuthFailed         // the server refused the credentials
)

func (s State) String() string {
	switch s {
	case StateDisconnected:
		return "disconnected"
	case StateConnecting:
		return "connecting"
	case StateConnected:
		return "connected"
	case StateHasSession:
		return "has-session"
	case StateExpired:
		return "expired"
	case StateAuthFailed:
		return "auth-failed"
	}
	return "unknown"
}

// stateOf maps go-zookeeper's states to the package's own, so that callers
// need not import go-zookeeper.
func stateOf(s zk.State) State {
	switch s {
	case zk.StateDisconnected:
		return StateDisconnected
	case zk.StateConnecting:
		return StateConnecting
	case zk.StateConnected:
		return StateConnected
	case zk.StateHasSession:
		return StateHasSession
	case zk.StateExpired:
		return StateExpired
	case zk.StateAuthFailed:
		return StateAuthFailed
	}
	return StateUnknown
}

// SessionEvent reports a change of the ZooKeeper connection or session of
// one of the Client's two sessions: its own (go-zookeeper's, for writes and
// per-node watches) or, with Watch set, its watch session (persistent
// recursive watches of Instancers and Catalogs). SessionID is that
// session's id.
type SessionEvent struct {
	State     State
	SessionID int64
	Server    string
	Time      time.Time
	Watch     bool // the event is the watch session's, not the Client's own
}

// Expired tells whether the event ends the session: ephemeral nodes are gone
// and watches are lost.
func (e SessionEvent) Expired() bool { return e.State == StateExpired }

// ClientOption configures a Client.
type ClientOption interface{ applyClient(*clientOptions) error }

type clientOptions struct {
	sessionTimeout time.Duration
	connectTimeout time.Duration
	user, password string
	logger         *slog.Logger
	onEvent        func(SessionEvent)
	dialer         DialFunc
	sec            zkconn.Security // TLS and SASL (security.go)
}

type clientOptionFunc func(*clientOptions) error

func (f clientOptionFunc) applyClient(o *clientOptions) error { return f(o) }

// SessionTimeout sets the ZooKeeper session timeout (default 10 s, allowed
// 200 ms to 5 min; the server may narrow it to its own min and max).
func SessionTimeout(d time.Duration) ClientOption {
	return clientOptionFunc(func(o *clientOptions) error {
		if d < MinSessionTimeout || d > MaxSessionTimeout {
			return &ConfigError{"session timeout", d.String(), fmt.Sprintf("allowed %v to %v", MinSessionTimeout, MaxSessionTimeout)}
		}
		o.sessionTimeout = d
		return nil
	})
}

// ConnectTimeout bounds how long a call waits for the Client's first
// session (default 10 s, minimum 100 ms): a call made while no server of
// the ensemble ever answered fails with an error that wraps zk.ErrNoServer
// then, whatever its ctx.
func ConnectTimeout(d time.Duration) ClientOption {
	return clientOptionFunc(func(o *clientOptions) error {
		if d < 100*time.Millisecond {
			return &ConfigError{"connect timeout", d.String(), "minimum 100ms"}
		}
		o.connectTimeout = d
		return nil
	})
}

// DigestAuth authenticates the session with ZooKeeper's digest scheme. Nodes
// the client creates are then world-readable and changeable only with these
// credentials.
func DigestAuth(user, password string) ClientOption {
	return clientOptionFunc(func(o *clientOptions) error {
		if user == "" || strings.Contains(user, ":") {
			return &ConfigError{"digest user", user, "non-empty, without ':'"}
		}
		o.user, o.password = user, password
		return nil
	})
}

// Logger sets the client's logger. The default discards everything.
func Logger(l *slog.Logger) ClientOption {
	return clientOptionFunc(func(o *clientOptions) error {
		if l == nil {
			return &ConfigError{"logger", "nil", "a *slog.Logger"}
		}
		o.logger = l
		return nil
	})
}

// OnSessionEvent calls f for every connection and session change of the
// Client's own session and of its watch session (SessionEvent.Watch tells
// which). The watch session reports StateConnecting, StateHasSession,
// StateDisconnected and StateExpired. f is called from the sessions'
// goroutines, possibly at once from both, and must not block.
func OnSessionEvent(f func(SessionEvent)) ClientOption {
	return clientOptionFunc(func(o *clientOptions) error {
		o.onEvent = f
		return nil
	})
}

// DialFunc opens a connection to a ZooKeeper server; net.DialTimeout is one.
type DialFunc func(network, address string, timeout time.Duration) (net.Conn, error)

// Dialer sets how connections to servers are made; tests use it to record
// or cut sessions (see zktest.SessionRecorder and zktest.Partition).
func Dialer(d DialFunc) ClientOption {
	return clientOptionFunc(func(o *clientOptions) error {
		if d == nil {
			return &ConfigError{"dialer", "nil", "a func such as net.DialTimeout"}
		}
		o.dialer = d
		return nil
	})
}

// Client is a connection to one ZooKeeper ensemble shared by any number of
// Registrars, Instancers and Catalogs. It holds at most two sessions, each
// opened when first needed and closed by Close:
//
//   - its own (go-zookeeper), for registrations, the per-node watches and
//     the Client's calls: opened by the first call that needs it;
//   - one read-only watch session that every Instancer and Catalog of the
//     Client shares, each watched service's recursive watch added on it:
//     opened by the first of them and closed when the last one stops.
//
// A process that only registers holds one session, one that only watches
// holds one, whatever the number of services. Both sessions try the
// ensemble's servers in one order, shuffled per Client, and move to the
// next server when theirs is lost; both keep their session across a
// disconnect shorter than the session timeout. The Client handles a
// chroot, digest auth and ACLs, and turns its own session's state changes
// into SessionEvents. Its methods are safe for concurrent use.
type Client struct {
	conn    *zk.Conn
	connp   atomic.Pointer[zk.Conn]
	servers []string
	chroot  string
	acl     []zk.ACL
	opts    clientOptions
	logger  *slog.Logger
	hp      *zkconn.HostProvider // one shuffled order for both sessions
	sec     *zkconn.Layer        // TLS and SASL on every connection (security.go)

	mu        sync.Mutex
	subs      map[int]func(SessionEvent)
	nodes     map[string]map[int]func(zk.Event) // watch event subscribers by node path
	nextSub   int
	closed    bool
	warnedACL map[string]bool      // parents whose loose ACL was reported
	ws        *zkconn.WatchSession // made by the first Instancer or Catalog
	sock      net.Conn             // go-zookeeper's last dialled socket (see tracked)
	drained   chan struct{}        // closed when the zk event channel is closed
	done      chan struct{}        // closed by Close

	up       chan struct{} // closed while the own session is up; under mu
	sessions int           // StateHasSession events seen
	down     bool          // no connection since the first session or a loss; under mu
	zxid     atomic.Int64  // the highest zxid the own session (and its bulk reads) saw since its zxid order began (lost.go)
	zkWanted chan struct{} // closed by wantSession
	zkReady  chan struct{} // closed once conn is set (nil only if Close came first)
	zkDone   chan struct{} // closed when the goroutine that made conn ended
	wantOnce sync.Once
	wantedAt atomic.Int64  // unix nanos of the first wantSession
	authDone chan struct{} // closed when digest auth was answered (at once without it)
	authErr  error         // set before authDone closes

	// The own session's loss and sync (lost.go).
	ownDown      atomic.Int64           // unix nanos since the own session has had no connection; 0 while it has one, and before the first
	ownTimeout   atomic.Int64           // ms, the session timeout the server granted the own session (zkconn.Fence)
	ownReplyZxid atomic.Int64           // the own session's last reply zxid, which go-zookeeper is handed as 0 (zkconn.Fence)
	ownRefused   atomic.Pointer[string] // the last server that closed the own session's handshake since it had a connection
	zmu          sync.Mutex             // orders resetOwnZxid and sawOwnZxid
	zlineage     uint64                 // counts the own session's losses; under zmu
	zsynced      uint64                 // the last zlineage whose session synced; under zmu
	syncing      *syncCall              // the sync under way, nil while none; under mu
}

// ParseConnectString splits "host:port,host:port/chroot" into its servers
// and chroot ("" for none). A server without a port gets 2181.
func ParseConnectString(s string) (servers []string, chroot string, err error) {
	hosts := s
	if i := strings.IndexByte(s, '/'); i >= 0 {
		hosts, chroot = s[:i], s[i:]
		if chroot == "/" {
			chroot = ""
		} else if err := zkValidPath(chroot); err != nil || strings.HasSuffix(chroot, "/") {
			return nil, "", &ConfigError{"chroot", chroot, "an absolute ZooKeeper path such as /apps/prod"}
		}
	}
	for _, h := range strings.Split(hosts, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		hp, err := parseServer(h)
		if err != nil {
			return nil, "", err
		}
		servers = append(servers, hp)
	}
	if len(servers) == 0 {
		return nil, "", &ConfigError{"connect string", s, "at least one host:port, e.g. zk1:2181,zk2:2181/chroot"}
	}
	return servers, chroot, nil
}

// parseServer checks one "host[:port]" of a connect string; a missing port
// is 2181. An IPv6 literal needs brackets: "[::1]:2181" or "[::1]".
func parseServer(h string) (string, error) {
	bad := func(want string) error { return &ConfigError{"server", h, want} }
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		switch {
		case strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]"):
			host = h[1 : len(h)-1]
		case strings.ContainsAny(h, "[]:"):
			return "", bad("host:port with a port from 1 to 65535; an IPv6 address in brackets, e.g. [::1]:2181")
		default:
			host = h
		}
		port = "2181"
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", bad("host:port with a port from 1 to 65535")
	}
	if !validHost(host) {
		return "", bad("a host name or IP address: letters, digits, '-', '.', '_'; IPv6 in brackets")
	}
	return net.JoinHostPort(host, port), nil
}

func validHost(host string) bool {
	if host == "" {
		return false
	}
	if net.ParseIP(host) != nil {
		return true
	}
	if len(host) > 253 {
		return false
	}
	for _, r := range host {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return false
		}
	}
	return true
}

func zkValidPath(p string) error {
	if !strings.HasPrefix(p, "/") || strings.Contains(p, "//") || path.Clean(p) != p {
		return errors.New("bad path")
	}
	return nil
}

// NewClient checks connect ("host:port,...[/chroot]") and opts and
// returns a Client that has dialled nothing yet: its sessions open when
// first needed (see Client). A call that needs the Client's own session
// waits for it within its ctx; while no server ever gave one, at most the
// connect timeout, then it fails with an error that says so and wraps
// zk.ErrNoServer. Instancers report an unreachable ensemble in Event.Err.
func NewClient(connect string, opts ...ClientOption) (*Client, error) {
	o := clientOptions{
		sessionTimeout: DefaultSessionTimeout,
		connectTimeout: DefaultConnectTimeout,
		logger:         slog.New(slog.DiscardHandler),
	}
	for _, opt := range opts {
		if err := opt.applyClient(&o); err != nil {
			return nil, err
		}
	}
	servers, chroot, err := ParseConnectString(connect)
	if err != nil {
		return nil, err
	}
	sec, err := zkconn.New(o.sec) // the files again: they may have changed since the option
	if err != nil {
		return nil, configError(err)
	}
	c := &Client{
		sec:     sec,
		servers: servers, chroot: chroot, opts: o,
		logger:   o.logger.With("component", "sd.client"),
		subs:     map[int]func(SessionEvent){},
		nodes:    map[string]map[int]func(zk.Event){},
		drained:  make(chan struct{}),
		done:     make(chan struct{}),
		up:       make(chan struct{}),
		zkWanted: make(chan struct{}),
		zkReady:  make(chan struct{}),
		zkDone:   make(chan struct{}),
		authDone: make(chan struct{}),
		acl:      zk.WorldACL(zk.PermAll),
	}
	if o.user != "" || o.sec.SASL != nil {
		c.acl = zk.WorldACL(zk.PermRead)
		if o.user != "" {
			c.acl = append(c.acl, zk.DigestACL(zk.PermAll, o.user, o.password)...)
		}
		if o.sec.SASL != nil {
			c.acl = append(c.acl, saslACL(o.sec.SASL.User))
		}
	}
	// One shuffled order for both sessions (Connect's Init of the same
	// servers keeps it).
	c.hp = zkconn.NewHostProvider(c.logger)
	if err := c.hp.Init(servers); err != nil {
		return nil, fmt.Errorf("sd: connect %v: %w", servers, err)
	}
	c.down = true
	go c.connectWhenWanted()
	return c, nil
}

// connectWhenWanted creates the go-zookeeper connection once wantSession
// was called, and authenticates it. A Client closed first creates none.
func (c *Client) connectWhenWanted() {
	defer close(c.zkDone)
	select {
	case <-c.zkWanted:
	case <-c.done:
		close(c.zkReady)
		close(c.authDone)
		return
	}
	conn, events, err := zk.Connect(c.servers, c.opts.sessionTimeout,
		zk.WithLogger(zkLogger{c.logger}),
		zk.WithLogInfo(false),
		zk.WithDialer(zk.Dialer(zkconn.Dialer(context.Background(), c.ownDialing()))),
		zk.WithHostProvider(c.hp),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type != zk.EventSession {
				c.route(ev)
				return
			}
			c.dispatch(SessionEvent{State: stateOf(ev.State), SessionID: c.SessionID(), Server: ev.Server, Time: time.Now()})
		}))
	if err != nil {
		// zk.Connect fails only on servers its HostProvider's Init
		// refuses, and NewClient's own Init of the same servers passed.
		panic(fmt.Sprintf("sd: go-zookeeper refused servers it accepted: %v", err))
	}
	c.conn = conn
	c.connp.Store(conn)
	close(c.zkReady)
	// Events also go to this channel, which drops them when full; drain
	// it so zk never blocks, and learn from its close that zk's
	// goroutines ended.
	go func() {
		for range events {
		}
		close(c.drained)
	}()
	if c.opts.user != "" {
		// Queued ahead of every call of ours (they wait for the session
		// and then for this), and re-sent by go-zookeeper on reconnects.
		if err := conn.AddAuth("digest", []byte(c.opts.user+":"+c.opts.password)); err != nil {
			c.authErr = fmt.Errorf("sd: digest auth as %q: %w", c.opts.user, err)
		}
	}
	close(c.authDone)
}

// SessionID is the Client's own session's id (0 while there is none): the
// session that owns its ephemeral nodes. WatchSessionID is the watch
// session's.
func (c *Client) SessionID() int64 {
	conn := c.connp.Load() // the event callback may run before NewClient stored c.conn
	if conn == nil {
		return 0
	}
	return conn.SessionID()
}

// SessionTimeout is the session timeout the client asked for.
func (c *Client) SessionTimeout() time.Duration { return c.opts.sessionTimeout }

// State is the state of the Client's sessions taken together: of the
// sessions it opened or wants (its own, once something wrote or watched per
// node; its watch session, while an Instancer or Catalog watches
// recursively), the first that has no session yet, else StateHasSession.
// A watch-only Client's state is its watch session's. StateConnecting while
// it wants none yet (see NewClient).
func (c *Client) State() State {
	conn := c.zkIfAny()
	w := c.watchState()
	switch {
	case conn == nil && w == StateUnknown:
		return StateConnecting
	case conn == nil:
		return w
	}
	z := stateOf(conn.State())
	if z != StateHasSession || w == StateUnknown {
		return z
	}
	return w
}

// watchState is the watch session's state, StateUnknown while it is not
// wanted (no recursive watcher, or the server refused them).
func (c *Client) watchState() State {
	c.mu.Lock()
	ws := c.ws
	c.mu.Unlock()
	if ws == nil {
		return StateUnknown
	}
	return stateOfWatch(ws.State())
}

// WatchSessionID is the watch session's id (0 while there is none).
func (c *Client) WatchSessionID() int64 {
	c.mu.Lock()
	ws := c.ws
	c.mu.Unlock()
	if ws == nil {
		return 0
	}
	return ws.SessionID()
}

// dispatchWatch reports a watch session's event to OnSessionEvent only: the
// Client's internal subscribers (Registrar, per-node Instancer, settle)
// follow its own session, whose expiry, unlike the watch session's, takes
// ephemeral nodes and per-node watches with it.
func (c *Client) dispatchWatch(we zkconn.WatchEvent) {
	ev := sessionEventOfWatch(we)
	c.logger.Debug("watch session event", "state", ev.State.String(), "session", zkconn.HexSession(ev.SessionID), "server", ev.Server)
	if c.opts.onEvent != nil {
		c.opts.onEvent(ev)
	}
}

// Servers lists the ensemble members the client knows.
func (c *Client) Servers() []string { return append([]string(nil), c.servers...) }

func (c *Client) dispatch(ev SessionEvent) {
	c.logger.Debug("session event", "state", ev.State.String(), "session", zkconn.HexSession(ev.SessionID), "server", ev.Server)
	c.mu.Lock()
	if ev.State == StateHasSession {
		c.ownDown.Store(0)
		c.ownRefused.Store(nil)
		c.sessions++
		c.down = false
		select {
		case <-c.up:
		default:
			close(c.up)
		}
	} else if c.sessions > 0 {
		c.ownDown.CompareAndSwap(0, time.Now().UnixNano()) // see ownLost
		c.down = true
		select {
		case <-c.up:
			c.up = make(chan struct{})
		default:
		}
	}
	c.mu.Unlock()
	if c.opts.onEvent != nil {
		c.opts.onEvent(ev)
	}
	c.mu.Lock()
	fns := make([]func(SessionEvent), 0, len(c.subs))
	for _, f := range c.subs {
		fns = append(fns, f)
	}
	c.mu.Unlock()
	for _, f := range fns {
		f(ev)
	}
}

// awaitSettled waits, within ctx, until the Client's own session is up.
// A call made while disconnected would wait in go-zookeeper's queue and go
// out the moment the connection returns, before its session event reached
// us: so from a disconnect on calls wait for the new connection. This is
// the one wait of the Client's calls; every call path of ours asks it
// first. Asking is what opens the session. A new session's first call
// waits for its sync too (syncOwn). (go-zookeeper's watch re-send needs no
// wait: zkconn.Fence.)
func (c *Client) awaitSettled(ctx context.Context) error {
	c.wantSession()
	var never <-chan time.Time // the connect timeout, while no session ever came
	for {
		refusals := c.sec.Refusals()
		if err := c.refusedByAll(); err != nil {
			return err
		}
		c.mu.Lock()
		down, up, had := c.down, c.up, c.sessions > 0
		c.mu.Unlock()
		if down {
			if !had && never == nil {
				t := time.NewTimer(time.Until(time.Unix(0, c.wantedAt.Load()).Add(c.opts.connectTimeout)))
				defer t.Stop()
				never = t.C
			}
			select {
			case <-up:
				continue
			case <-refusals:
				continue
			case <-never:
				return c.errNoServer()
			case <-ctx.Done():
				return ctx.Err()
			case <-c.done:
				return ErrClosed
			}
		}
		select {
		case <-c.authDone:
			if c.authErr != nil {
				return c.authErr
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return ErrClosed
		}
		return c.syncOwn(ctx) // a new session's first call syncs it (lost.go)
	}
}

// errNoServer is the error of a call that waited the connect timeout
// while no server ever gave a session.
func (c *Client) errNoServer() error {
	if f := c.sec.Failure(); f != nil {
		return &noServerError{fmt.Errorf("sd: no ZooKeeper server of %v gave a session within %v: %w", c.servers, c.opts.connectTimeout, f)}
	}
	return &noServerError{fmt.Errorf("sd: no ZooKeeper server of %v gave a session within %v: check the connect string and that the ensemble is up: %w",
		c.servers, c.opts.connectTimeout, zk.ErrNoServer)}
}

// noServerError is errNoServer's type: unlike a lost connection, which a
// call waits out, it is final, since no server ever answered (a wrong
// connect string would otherwise be retried for ever).
type noServerError struct{ err error }

func (e *noServerError) Error() string { return e.err.Error() }
func (e *noServerError) Unwrap() error { return e.err }

// neverConnected tells whether err is errNoServer's.
func neverConnected(err error) bool {
	var ns *noServerError
	return errors.As(err, &ns)
}

// hadSession tells whether a server ever gave the Client a session, its
// own or the watch session.
func (c *Client) hadSession() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sessions > 0 {
		return true
	}
	if c.ws == nil {
		return false
	}
	created, resumed := c.ws.Stats()
	return created+resumed > 0
}

// subscribe registers f for session events until the returned func is
// called. f must not block.
func (c *Client) subscribe(f func(SessionEvent)) (cancel func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.nextSub
	c.nextSub++
	c.subs[id] = f
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.subs, id)
	}
}

// subscribeNodes registers f for the watch events of node dir and of its
// children until the returned func is called. f is called from
// go-zookeeper's receive goroutine and must not block. Routing events here
// spares a goroutine per armed watch: the watch's own channel, buffered,
// is left to go-zookeeper, which drops it once it fired.
func (c *Client) subscribeNodes(dir string, f func(zk.Event)) (cancel func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.nextSub
	c.nextSub++
	if c.nodes[dir] == nil {
		c.nodes[dir] = map[int]func(zk.Event){}
	}
	c.nodes[dir][id] = f
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.nodes[dir], id)
		if len(c.nodes[dir]) == 0 {
			delete(c.nodes, dir)
		}
	}
}

// route hands a watch event to the subscribers of its node and of its parent.
func (c *Client) route(ev zk.Event) {
	if ev.Path == "" {
		return
	}
	c.mu.Lock()
	var fns []func(zk.Event)
	for _, f := range c.nodes[ev.Path] {
		fns = append(fns, f)
	}
	if ev.Path != "/" {
		for _, f := range c.nodes[path.Dir(ev.Path)] {
			fns = append(fns, f)
		}
	}
	c.mu.Unlock()
	for _, f := range fns {
		f(ev)
	}
}

// Connected reports whether every session the Client opened or wants (its
// own and its watch session, see State) has a session and a connection
// now; false while it wants none.
func (c *Client) Connected() bool { return c.State() == StateHasSession }

// ownConnected reports whether the Client's own session is usable now: the
// one that writes, and whose reconnect kicks a Registrar's keeper.
func (c *Client) ownConnected() bool {
	conn := c.zkIfAny()
	return conn != nil && conn.State() == zk.StateHasSession
}

// full maps a client path to the server path under the chroot.
func (c *Client) full(p string) string {
	if c.chroot == "" {
		return p
	}
	if p == "/" {
		return c.chroot
	}
	return c.chroot + p
}

// callFunc sends one ZooKeeper request, fn, within ctx and the caller's
// reply limit (Registrar.call).
type callFunc func(ctx context.Context, fn func() error) error

// ensurePath makes p and its missing parents: CONTAINER nodes when
// container is set, as Curator creates them (persistent ones on servers
// older than 3.5), PERSISTENT ones otherwise. Each request goes through
// call, so that a lost reply holds nobody past ctx or the reply limit.
func (c *Client) ensurePath(ctx context.Context, p string, container bool, call callFunc) error {
	full := c.full(p)
	for walk := 1; ; walk++ {
		err := c.createPath(ctx, full, container, call)
		// A container above was reaped between the walk's read of a level
		// and its create below (the server removes empty ones on its own
		// schedule): walk again from the top.
		if errors.Is(err, zk.ErrNoNode) && walk < maxPathWalks {
			continue
		}
		return err
	}
}

// maxPathWalks bounds ensurePath's walks: each lost one needs the server to
// reap a parent in the moment between two requests.
const maxPathWalks = 4

// createPath makes each missing node of full, from the root down. It reads
// each level before it creates it, as Curator's creatingParentsIfNeeded
// does: ZooKeeper checks CREATE on the parent before it answers NODEEXISTS,
// so creating a node that exists under a parent the client may only read
// (a chroot's, or the service node an operator made for one digest user:
// docs/SECURITY.md) fails with NOAUTH.
func (c *Client) createPath(ctx context.Context, full string, container bool, call callFunc) error {
	cur := ""
	for _, part := range strings.Split(strings.TrimPrefix(full, "/"), "/") {
		if part == "" {
			continue
		}
		cur += "/" + part
		var ok bool
		if err := call(ctx, func() (err error) { ok, _, err = c.zk().Exists(cur); return err }); err != nil {
			return fmt.Errorf("sd: read %s: %w", cur, err)
		}
		if ok {
			c.checkParentACL(ctx, cur, call)
			continue
		}
		useContainer := container
		if cur == c.chroot || strings.HasPrefix(c.chroot, cur+"/") {
			useContainer = false // the chroot itself is the operator's, not ours to let vanish
		}
		// Parents get the client's ACL too: with world-all parents, anyone
		// could delete a live instance (delete needs the parent's DELETE
		// permission) or plant a fake one beside it.
		err := call(ctx, func() error {
			if useContainer {
				_, err := c.zk().CreateContainer(cur, nil, zk.FlagContainer, c.acl)
				if !errors.Is(err, zk.ErrUnknown) && !errors.Is(err, zk.ErrAPIError) && !errors.Is(err, zk.ErrInvalidFlags) {
					return err
				}
			}
			_, err := c.zk().Create(cur, nil, 0, c.acl)
			return err
		})
		if errors.Is(err, zk.ErrNodeExists) { // made meanwhile, by someone else or by a create whose reply was lost
			c.checkParentACL(ctx, cur, call)
			err = nil
		}
		if err != nil {
			return fmt.Errorf("sd: create %s: %w", cur, err)
		}
	}
	return nil
}

// checkParentACL warns, once per path, when digest auth is set but a parent
// that existed before lets anyone create or delete children: the library
// cannot tighten an ACL it did not set (the node may be shared), so the
// operator has to; see the README's security section.
func (c *Client) checkParentACL(ctx context.Context, p string, call callFunc) {
	if c.opts.user == "" && c.opts.sec.SASL == nil || p == c.chroot || strings.HasPrefix(c.chroot, p+"/") {
		return
	}
	c.mu.Lock()
	if c.warnedACL == nil {
		c.warnedACL = map[string]bool{}
	}
	seen := c.warnedACL[p]
	c.warnedACL[p] = true
	c.mu.Unlock()
	if seen {
		return
	}
	var acl []zk.ACL
	if err := call(ctx, func() (err error) { acl, _, err = c.zk().GetACL(p); return err }); err != nil {
		return
	}
	for _, a := range acl {
		if a.Scheme == "world" && a.Perms&(zk.PermCreate|zk.PermDelete) != 0 {
			c.logger.Warn("a parent node lets anyone create or delete instances under it; set its ACL to the client's",
				"path", p, "fix", c.parentACLFix(p))
			return
		}
	}
}

// Close ends both sessions (the Client's own, which removes every
// ephemeral node it owns, and the watch session), makes every call and
// Instancer still running end with ErrClosed, and waits for the Client's
// goroutines (at most a few seconds: go-zookeeper's may hang on calls in
// flight). It is idempotent.
func (c *Client) Close() {
	c.mu.Lock()
	already := c.closed
	c.closed = true
	ws := c.ws
	c.mu.Unlock()
	if !already {
		close(c.done)
	}
	// Both sessions wait for the server to answer their close (a second at
	// most each): at once, not one after the other, so that a loaded
	// server costs a stop's session step one wait, not two.
	wsClosed := make(chan struct{})
	go func() { // owned by Close, which waits for it
		defer close(wsClosed)
		if ws != nil {
			ws.Close()
		}
	}()
	defer func() { <-wsClosed }()
	deadline := time.Now().Add(closeWait)
	<-c.zkReady // at once: connectWhenWanted sees done
	if !already && c.conn != nil {
		c.conn.Close()
		c.mu.Lock()
		if c.sock != nil {
			_ = c.sock.Close() // see tracked
		}
		c.mu.Unlock()
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	drained := c.drained
	if c.conn == nil {
		drained = c.zkDone
	}
	for _, ch := range []<-chan struct{}{c.zkDone, drained} {
		select {
		case <-ch:
		case <-t.C:
			c.logger.Warn("zk client goroutines did not end in time", "wait", closeWait)
			return
		}
	}
}

// closeWait bounds Close.
const closeWait = 5 * time.Second

// Done is closed when Close is called.
func (c *Client) Done() <-chan struct{} { return c.done }

// zkLogger sends go-zookeeper's log lines to slog at debug level.
type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	z.l.Debug("zk: " + fmt.Sprintf(format, args...))
}

// wantSession lets the Client dial its own session.
func (c *Client) wantSession() {
	c.wantOnce.Do(func() {
		c.wantedAt.Store(time.Now().UnixNano())
		close(c.zkWanted)
	})
}

// watches is the Client's watch session, made at the first call; after
// Close it is one that never opens.
func (c *Client) watches() *zkconn.WatchSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ws == nil {
		c.ws = zkconn.NewWatchSession(c.watchConfig())
		if c.closed {
			c.ws.Close()
		}
	}
	return c.ws
}

// WatchSessionStats counts the watch sessions the Client made and resumed.
func (c *Client) WatchSessionStats() WatchSessionStats {
	c.mu.Lock()
	ws := c.ws
	c.mu.Unlock()
	if ws == nil {
		return WatchSessionStats{}
	}
	created, resumed := ws.Stats()
	return WatchSessionStats{Created: created, Resumed: resumed}
}

// WatchSessionAhead once chose whether NewClient opened the watch session
// ahead of need.
//
// Deprecated: the watch session opens when the first Instancer or Catalog
// needs it; this option does nothing.
func WatchSessionAhead(bool) ClientOption {
	return clientOptionFunc(func(*clientOptions) error { return nil })
}

// zk is the Client's own connection (go-zookeeper), which may still be
// dialling its session; asking for it opens it. Call awaitSettled first:
// after Close it is nil.
func (c *Client) zk() *zk.Conn {
	c.wantSession()
	<-c.zkReady
	return c.conn
}

// zkIfAny is the connection when it was created, else nil.
func (c *Client) zkIfAny() *zk.Conn {
	select {
	case <-c.zkReady:
		return c.conn
	default:
		return nil
	}
}
