package sd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	kitsd "github.com/go-kit/kit/sd"
	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"
)

var _ kitsd.Registrar = (*Registrar)(nil)

// ErrNotRegistered is returned by SetStatus before Register or after Deregister.
var ErrNotRegistered = errors.New("sd: instance is not registered")

// ConflictError says that another live session holds the instance's node.
type ConflictError struct {
	Path  string
	Owner int64 // the other session
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("sd: %s is held by another live session 0x%x: give this instance another id, or stop the other one", e.Path, e.Owner)
}

// RegistrarEventKind names what a Registrar did.
type RegistrarEventKind string

// Registrar event kinds.
const (
	EventRegistered     RegistrarEventKind = "registered"     // node created in the current session
	EventReregistered   RegistrarEventKind = "reregistered"   // node re-created after expiry or removal
	EventStatusSet      RegistrarEventKind = "status"         // SetStatus wrote the node
	EventDeregistered   RegistrarEventKind = "deregistered"   // node deleted by Deregister
	EventRegisterFailed RegistrarEventKind = "registerFailed" // a background (re-)registration attempt failed
)

// RegistrarEvent reports a change made by a Registrar.
type RegistrarEvent struct {
	Kind      RegistrarEventKind
	Path      string
	SessionID int64
	Czxid     int64
	Err       error
}

// RegistrarOption configures a Registrar.
type RegistrarOption interface{ applyRegistrar(*registrarOptions) error }

type registrarOptions struct {
	basePath string
	codec    Codec
	logger   *slog.Logger
	onEvent  func(RegistrarEvent)
}

type registrarOptionFunc func(*registrarOptions) error

func (f registrarOptionFunc) applyRegistrar(o *registrarOptions) error { return f(o) }

// SharedOption is an option that both Registrar and Instancer accept.
type SharedOption interface {
	RegistrarOption
	InstancerOption
}

type sharedOption struct {
	r func(*registrarOptions) error
	i func(*instancerOptions) error
}

func (s sharedOption) applyRegistrar(o *registrarOptions) error { return s.r(o) }
func (s sharedOption) applyInstancer(o *instancerOptions) error { return s.i(o) }

// BasePath sets the parent of service nodes (default "/services").
func BasePath(p string) SharedOption {
	check := func() error {
		if zkValidPath(p) != nil || p == "/" {
			return &ConfigError{"base path", p, "an absolute ZooKeeper path such as /services"}
		}
		return nil
	}
	return sharedOption{
		r: func(o *registrarOptions) error { o.basePath = p; return check() },
		i: func(o *instancerOptions) error { o.basePath = p; return check() },
	}
}

// WithCodec sets the node layout (default CuratorCodec).
func WithCodec(c Codec) SharedOption {
	check := func() error {
		if c == nil {
			return &ConfigError{"codec", "nil", "CuratorCodec{}, PlainCodec{} or your own"}
		}
		return nil
	}
	return sharedOption{
		r: func(o *registrarOptions) error { o.codec = c; return check() },
		i: func(o *instancerOptions) error { o.codec = c; return check() },
	}
}

// WithLogger sets the logger (default: silent).
func WithLogger(l *slog.Logger) SharedOption {
	check := func() error {
		if l == nil {
			return &ConfigError{"logger", "nil", "a *slog.Logger"}
		}
		return nil
	}
	return sharedOption{
		r: func(o *registrarOptions) error { o.logger = l; return check() },
		i: func(o *instancerOptions) error { o.logger = l; return check() },
	}
}

// OnRegistrarEvent calls f after every change the Registrar makes. f is
// called from the Registrar's goroutines and must not block.
func OnRegistrarEvent(f func(RegistrarEvent)) RegistrarOption {
	return registrarOptionFunc(func(o *registrarOptions) error { o.onEvent = f; return nil })
}

// Registrar keeps one instance registered as an EPHEMERAL node
// /<basePath>/<service>/<id>. After Register it watches its node and its
// session: when the session expires or the node is removed, it re-creates
// the node in the current session. It never deletes a node another
// session owns.
type Registrar struct {
	c      *Client
	codec  Codec
	path   string
	logger *slog.Logger
	opts   registrarOptions

	mu         sync.Mutex
	inst       Instance // current content, status included
	registered bool     // between a successful Register and Deregister
	czxid      int64    // of the node we created, 0 if none
	lastCzxid  int64    // of the last node we held, kept after Deregister
	session    int64    // the session that created it

	runMu  sync.Mutex // serializes start/stop of the keeper goroutine
	stop   chan struct{}
	done   chan struct{}
	kick   chan struct{}
	unsubs func()
}

// NewRegistrar prepares inst for registration. inst needs Name, Address and
// Port (or SSLPort); an empty ID gets a random UUID, as Spring does. Nothing
// is written until Register.
func NewRegistrar(c *Client, inst Instance, opts ...RegistrarOption) (*Registrar, error) {
	o := registrarOptions{basePath: DefaultBasePath, codec: CuratorCodec{}, logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		if err := opt.applyRegistrar(&o); err != nil {
			return nil, err
		}
	}
	if c == nil {
		return nil, &ConfigError{"client", "nil", "a *sd.Client from NewClient"}
	}
	if !ValidNodeName(inst.Name) {
		return nil, &ConfigError{"service name", inst.Name, "a non-empty name without '/'"}
	}
	if inst.ID == "" {
		inst.ID = uuid.NewString()
	}
	inst = inst.clone()
	if _, ok := inst.Metadata[MetadataStatus]; !ok {
		inst.Metadata[MetadataStatus] = string(StatusUp)
	}
	if inst.RegistrationTime.IsZero() {
		inst.RegistrationTime = time.Now()
	}
	if _, err := o.codec.Encode(inst); err != nil {
		return nil, err
	}
	name := o.codec.NodeName(inst)
	if !ValidNodeName(name) {
		return nil, &ConfigError{"node name", name, "non-empty, without '/'"}
	}
	r := &Registrar{
		c: c, codec: o.codec, opts: o, inst: inst,
		path: path.Join(o.basePath, inst.Name, name),
	}
	r.logger = o.logger.With("component", "sd.registrar", "path", r.path, "instance", inst.ID)
	return r, nil
}

// Czxid is the creation zxid of the node of the latest registration, kept
// after DeregisterContext so that the stop can name the registration it
// ends (flush requests are bound to it); 0 before the first registration.
func (r *Registrar) Czxid() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastCzxid
}

// Path is the instance's node path (inside the client's chroot).
func (r *Registrar) Path() string { return r.path }

// Instance is what the Registrar writes, status included.
func (r *Registrar) Instance() Instance {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inst.clone()
}

// Register implements go-kit's sd.Registrar: it registers within twice the
// session timeout and logs a failure. Use RegisterContext to get the error.
func (r *Registrar) Register() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*r.c.SessionTimeout())
	defer cancel()
	if err := r.RegisterContext(ctx); err != nil {
		r.logger.Error("register failed", "err", err)
	}
}

// Deregister implements go-kit's sd.Registrar; see DeregisterContext.
func (r *Registrar) Deregister() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*r.c.SessionTimeout())
	defer cancel()
	if err := r.DeregisterContext(ctx); err != nil {
		r.logger.Error("deregister failed", "err", err)
	}
}

// RegisterContext creates the parents (CONTAINER nodes, as Curator does) and
// the instance's node, then keeps it registered until DeregisterContext.
// When another live session holds the node, it waits for that node to go
// until ctx ends, then returns a *ConflictError. Calling it while
// registered is a no-op.
func (r *Registrar) RegisterContext(ctx context.Context) error {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	r.mu.Lock()
	if r.registered {
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	if err := r.c.ensurePath(ctx, path.Dir(r.path), true); err != nil {
		return err
	}
	var watch <-chan zk.Event // armed once, re-armed only after it fired
	for {
		err := r.ensure(ctx)
		if err == nil {
			break
		}
		var conflict *ConflictError
		if !errors.As(err, &conflict) && !isTransient(err) {
			return err
		}
		// Wait for the holder's node to go (or the connection to return).
		if watch == nil {
			if _, _, ch, werr := r.c.conn.ExistsW(r.c.full(r.path)); werr == nil {
				watch = ch
			}
		}
		ch := watch
		t := time.NewTimer(250 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("sd: register %s: %w (%w)", r.path, err, ctx.Err())
		case <-ch:
			watch = nil
		case <-t.C:
		}
		t.Stop()
	}
	r.mu.Lock()
	r.registered = true
	r.mu.Unlock()
	r.startKeeper()
	return nil
}

func isTransient(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrSessionExpired) ||
		errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrSessionMoved)
}

// ensure makes sure our node exists in the current session. It reads the
// node's ephemeralOwner before anything else: a node of ours is kept as is
// (no delete and re-create, so watchers see no flap), a node of another
// live session is a conflict.
func (r *Registrar) ensure(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	full := r.c.full(r.path)
	session := r.c.SessionID()
	if session == 0 {
		// Between an expiry and the next session: our own new node could
		// look like another session's.
		return fmt.Errorf("sd: register %s: %w", r.path, zk.ErrConnectionClosed)
	}
	_, stat, err := r.c.conn.Get(full)
	switch {
	case err == nil && stat.EphemeralOwner == session && session != 0:
		r.mu.Lock()
		r.czxid, r.session, r.lastCzxid = stat.Czxid, session, stat.Czxid
		r.mu.Unlock()
		return nil
	case err == nil:
		return &ConflictError{Path: r.path, Owner: stat.EphemeralOwner}
	case !errors.Is(err, zk.ErrNoNode):
		return fmt.Errorf("sd: read %s: %w", r.path, err)
	}
	r.mu.Lock()
	inst := r.inst.clone() // SetStatus may write Metadata meanwhile
	before := r.czxid
	r.mu.Unlock()
	data, err := r.codec.Encode(inst)
	if err != nil {
		return err
	}
	if _, err := r.c.conn.Create(full, data, zk.FlagEphemeral, r.c.acl); err != nil {
		if errors.Is(err, zk.ErrNoNode) { // the container parent was reaped meanwhile
			if perr := r.c.ensurePath(ctx, path.Dir(r.path), true); perr != nil {
				return perr
			}
			return fmt.Errorf("sd: create %s: %w", r.path, zk.ErrConnectionClosed)
		}
		if errors.Is(err, zk.ErrNodeExists) {
			return r.ensure(ctx)
		}
		return fmt.Errorf("sd: create %s: %w", r.path, err)
	}
	_, stat, err = r.c.conn.Exists(full)
	if err != nil {
		return fmt.Errorf("sd: read %s: %w", r.path, err)
	}
	r.mu.Lock()
	r.czxid, r.session, r.lastCzxid = stat.Czxid, session, stat.Czxid
	r.mu.Unlock()
	kind := EventRegistered
	if before != 0 {
		kind = EventReregistered
	}
	r.logger.Info(string(kind), "session", session, "czxid", stat.Czxid)
	r.emit(RegistrarEvent{Kind: kind, Path: r.path, SessionID: session, Czxid: stat.Czxid})
	return nil
}

func (r *Registrar) emit(ev RegistrarEvent) {
	if r.opts.onEvent != nil {
		r.opts.onEvent(ev)
	}
}

// startKeeper runs the goroutine that re-creates the node when it goes.
func (r *Registrar) startKeeper() {
	r.stop, r.done, r.kick = make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)
	kick := r.kick
	r.unsubs = r.c.subscribe(func(ev SessionEvent) {
		// Watches survive a reconnect within the session; only a new
		// session (after expiry) needs the node re-created at once.
		r.mu.Lock()
		owner := r.session
		r.mu.Unlock()
		if (ev.State == zk.StateHasSession && ev.SessionID != owner) || ev.State == zk.StateExpired {
			select {
			case kick <- struct{}{}:
			default:
			}
		}
	})
	go r.keep(r.stop, r.done)
}

// stopKeeper stops the keeper goroutine and waits for it, or for ctx: a
// keeper inside a ZooKeeper call exits when that call returns, which the
// client bounds by its receive timeout.
func (r *Registrar) stopKeeper(ctx context.Context) {
	if r.stop == nil {
		return
	}
	r.unsubs()
	close(r.stop)
	select {
	case <-r.done:
	case <-ctx.Done():
	}
	r.stop = nil
}

func (r *Registrar) keep(stop, done chan struct{}) {
	defer close(done)
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
		case <-r.c.Done(): // the session is gone with its client: nothing to keep
		case <-ctx.Done():
		}
		cancel()
	}()
	var watch <-chan zk.Event // re-armed only after it fired: watchers do not pile up
	for {
		// Arm a watch on our node, then make sure it exists.
		var err error
		if watch == nil {
			var ch <-chan zk.Event
			if _, _, ch, err = r.c.conn.ExistsW(r.c.full(r.path)); err == nil {
				watch = ch
			}
		}
		if err == nil {
			err = r.ensure(ctx)
		}
		var timer *time.Timer
		var wait <-chan time.Time
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.logger.Warn("keeping registration failed", "err", err)
			r.emit(RegistrarEvent{Kind: EventRegisterFailed, Path: r.path, SessionID: r.c.SessionID(), Err: err})
			timer = time.NewTimer(bo.NextBackOff())
			wait = timer.C
		} else {
			bo.Reset()
		}
		select {
		case <-ctx.Done():
			return
		case <-watch:
			watch = nil
		case <-r.kick:
		case <-wait:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// SetStatus writes status into the node's metadata with a version-checked
// setData, keeping every other field. OUT_OF_SERVICE hides the instance
// from readers without removing it.
func (r *Registrar) SetStatus(ctx context.Context, status Status) error {
	if status != StatusUp && status != StatusOutOfService {
		return &ConfigError{"status", string(status), "UP or OUT_OF_SERVICE"}
	}
	r.mu.Lock()
	r.inst.Metadata[MetadataStatus] = string(status)
	registered := r.registered
	r.mu.Unlock()
	if !registered {
		return ErrNotRegistered
	}
	full := r.c.full(r.path)
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sd: set status of %s: %w", r.path, err)
		}
		var data []byte
		var stat *zk.Stat
		err := r.c.do(ctx, func() (err error) { data, stat, err = r.c.conn.Get(full); return err })
		if err != nil {
			return fmt.Errorf("sd: set status of %s: %w", r.path, err)
		}
		if stat.EphemeralOwner != r.c.SessionID() {
			return &ConflictError{Path: r.path, Owner: stat.EphemeralOwner}
		}
		cur, err := r.codec.Decode(r.inst.Name, path.Base(r.path), data)
		if err != nil {
			cur = r.Instance() // our node, unreadable: rewrite it whole
		}
		if cur.Metadata == nil {
			cur.Metadata = map[string]string{}
		}
		cur.Metadata[MetadataStatus] = string(status)
		out, err := r.codec.Encode(cur)
		if err != nil {
			return err
		}
		err = r.c.do(ctx, func() error { _, err := r.c.conn.Set(full, out, stat.Version); return err })
		if errors.Is(err, zk.ErrBadVersion) && attempt < 5 {
			continue
		}
		if err != nil {
			return fmt.Errorf("sd: set status of %s: %w", r.path, err)
		}
		r.emit(RegistrarEvent{Kind: EventStatusSet, Path: r.path, SessionID: stat.EphemeralOwner, Czxid: stat.Czxid})
		return nil
	}
}

// DeregisterContext stops keeping the node and deletes it, only if the
// current session owns it. It is idempotent: a missing node is success.
func (r *Registrar) DeregisterContext(ctx context.Context) error {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	r.mu.Lock()
	r.registered = false
	r.czxid = 0
	r.mu.Unlock()
	r.stopKeeper(ctx)
	full := r.c.full(r.path)
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sd: deregister %s: %w", r.path, err)
		}
		var ok bool
		var stat *zk.Stat
		err := r.c.do(ctx, func() (err error) { ok, stat, err = r.c.conn.Exists(full); return err })
		if err != nil {
			return fmt.Errorf("sd: deregister %s: %w", r.path, err)
		}
		if !ok || stat.EphemeralOwner != r.c.SessionID() {
			return nil // gone, or another session's: not ours to delete
		}
		err = r.c.do(ctx, func() error { return r.c.conn.Delete(full, stat.Version) })
		if errors.Is(err, zk.ErrBadVersion) {
			continue
		}
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return fmt.Errorf("sd: deregister %s: %w", r.path, err)
		}
		r.logger.Info("deregistered")
		r.emit(RegistrarEvent{Kind: EventDeregistered, Path: r.path, SessionID: stat.EphemeralOwner, Czxid: stat.Czxid})
		return nil
	}
}
