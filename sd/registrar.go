package sd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	kitsd "github.com/go-kit/kit/sd"
	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"

	"github.com/gracekit/gracekit/internal/zkconn"
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

// ErrPersistentNode says that a PERSISTENT node (ephemeralOwner 0, made
// by an operator or another tool) holds the instance's path: no session's
// end removes it, so RegisterContext refuses it at once instead of
// waiting for it to go.
var ErrPersistentNode = errors.New("sd: a persistent node holds the instance's path")

// heldBy is the error for a node at our path that the current session
// does not own (stat is that node's).
func (r *Registrar) heldBy(stat *zk.Stat) error {
	if stat.EphemeralOwner == 0 {
		return fmt.Errorf("%w: %s is not ephemeral, so no session's end removes it: delete it (zkCli.sh delete %s) and register again, or give this instance another id",
			ErrPersistentNode, r.path, r.c.full(r.path))
	}
	return &ConflictError{Path: r.path, Owner: stat.EphemeralOwner}
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
	EventDrained        RegistrarEventKind = "drained"        // an operator's marker was found on the node (see Drain)
	EventUndrained      RegistrarEventKind = "undrained"      // the marker was removed
	EventWithdrawn      RegistrarEventKind = "withdrawn"      // node deleted while out of rotation, by a codec that stores no status
)

// RegistrarEvent reports a change made by a Registrar.
type RegistrarEvent struct {
	Kind      RegistrarEventKind
	Path      string
	SessionID int64
	Czxid     int64
	Err       error
	// DrainedBy is the marker's value, for EventDrained.
	DrainedBy string
}

// RegistrarOption configures a Registrar.
type RegistrarOption interface{ applyRegistrar(*registrarOptions) error }

type registrarOptions struct {
	basePath string
	codec    Codec
	logger   *slog.Logger
	onEvent  func(RegistrarEvent)
	parents  Parents // 0: the codec's default
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
// called from the Registrar's goroutines and must not block. Given more
// than once, every f is called, in order.
func OnRegistrarEvent(f func(RegistrarEvent)) RegistrarOption {
	return registrarOptionFunc(func(o *registrarOptions) error {
		if prev := o.onEvent; prev != nil {
			o.onEvent = func(ev RegistrarEvent) { prev(ev); f(ev) }
		} else {
			o.onEvent = f
		}
		return nil
	})
}

// Parents says how a Registrar creates the missing parents of its node.
type Parents int

const (
	// ParentsContainer creates CONTAINER nodes, which the server deletes
	// once their last child is gone, as Curator does; persistent ones on
	// servers older than 3.5. The default with CuratorCodec.
	ParentsContainer Parents = iota + 1
	// ParentsPersistent creates PERSISTENT nodes, which stay, as tools of
	// the plain layout create them (Curator's creatingParentsIfNeeded) and
	// expect the root to stay. The default with PlainCodec.
	ParentsPersistent
)

// ParentMode sets how the missing parents of the instance's node are
// created. Parents that exist are left as they are.
func ParentMode(p Parents) RegistrarOption {
	return registrarOptionFunc(func(o *registrarOptions) error {
		if p != ParentsContainer && p != ParentsPersistent {
			return &ConfigError{"parent mode", fmt.Sprint(int(p)), "ParentsContainer or ParentsPersistent"}
		}
		o.parents = p
		return nil
	})
}

// Registrar keeps one instance registered as an EPHEMERAL node
// /<basePath>/<service>/<id>. After Register, one goroutine of its own, the
// keeper, owns what ZooKeeper should hold: it watches the node and the
// session, re-creates the node in the current session when it goes, and
// writes the wanted status until ZooKeeper holds it, after any disconnect
// or expiry. It never deletes a node another session owns.
type Registrar struct {
	c      *Client
	codec  Codec
	path   string
	logger *slog.Logger
	opts   registrarOptions

	mu         sync.Mutex
	inst       Instance      // wanted content, status included
	want       uint64        // bumped by each SetStatus
	wrote      uint64        // the last want ZooKeeper is known to hold
	converged  chan struct{} // closed and replaced when wrote or registered changes
	lastErr    error         // of the keeper's last attempt, nil when it succeeded
	registered bool          // between a successful Register and Deregister
	czxid      int64         // of the node we created, 0 if none
	lastCzxid  int64         // of the last node we held, kept after Deregister
	session    int64         // the session that created it
	drainedBy  string        // the operator's marker last seen on the node (Drain), "" if none
	stamped    bool          // inst.RegistrationTime is the caller's or the first create's
	absent     bool          // the codec stores no status: out of rotation is no node (see SetStatus)
	calls      int           // ZooKeeper calls under way, abandoned ones included
	quiet      chan struct{} // closed when calls drops to zero; nil when zero

	kick chan struct{} // wakes the keeper; nil while none runs

	runMu   sync.Mutex // serializes Register and Deregister
	kcancel context.CancelFunc
	kdone   chan struct{}
	unsubs  func()
}

// NewRegistrar prepares inst for registration. inst needs Name, Address and
// Port (or SSLPort); an empty ID gets a random UUID, as Spring does. Nothing
// is written until Register. A zero RegistrationTime becomes the time of
// the Registrar's first create of the node, after the provider's readiness
// check, and stays that through every re-create (an expiry, a delete, a
// deregistration and registration again): slow start ramps a process
// that started, not a session that was replaced (docs/SLOWSTART.md).
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
	if _, err := o.codec.Encode(inst); err != nil {
		return nil, err
	}
	name := o.codec.NodeName(inst)
	if !ValidNodeName(name) {
		return nil, &ConfigError{"node name", name, "non-empty, without '/'"}
	}
	if err := CheckMetadata(inst.Metadata); err != nil {
		return nil, err
	}
	if o.parents == 0 {
		o.parents = ParentsContainer
		if _, plain := o.codec.(PlainCodec); plain {
			o.parents = ParentsPersistent
		}
	}
	r := &Registrar{
		c: c, codec: o.codec, opts: o, inst: inst,
		path:      path.Join(o.basePath, inst.Name, name),
		converged: make(chan struct{}),
		absent:    !StoresStatus(o.codec, inst),
		stamped:   !inst.RegistrationTime.IsZero(),
	}
	r.logger = o.logger.With("component", "sd.registrar", "path", r.path, "instance", inst.ID)
	return r, nil
}

// CheckRegistrarOptions applies opts as NewRegistrar does and returns the
// first error, so that code that builds its Registrar only once connected
// (provider.New) can refuse a bad option, such as an unclean BasePath,
// when it is built.
func CheckRegistrarOptions(opts ...RegistrarOption) error {
	var o registrarOptions
	for _, opt := range opts {
		if err := opt.applyRegistrar(&o); err != nil {
			return err
		}
	}
	return nil
}

// Czxid is the creation zxid of the node of the latest registration, kept
// after DeregisterContext so that the stop can name the registration it
// ends (flush requests are bound to it); 0 before the first registration.
func (r *Registrar) Czxid() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastCzxid
}

// DrainedBy is who drained the instance (DrainedByOperator), as last
// seen on its node; "" when it is not drained. While drained the node
// stays OUT_OF_SERVICE, whatever SetStatus asks for.
func (r *Registrar) DrainedBy() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.drainedBy
}

// Path is the instance's node path (inside the client's chroot).
func (r *Registrar) Path() string { return r.path }

// Instance is what the Registrar writes, status included. Its
// RegistrationTime is zero until the first create, unless it was given.
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

// ensureParents creates the missing parents of the node as ParentMode
// says; their requests, as every one of the Registrar's, go through call.
func (r *Registrar) ensureParents(ctx context.Context) error {
	return r.c.ensurePath(ctx, path.Dir(r.path), r.opts.parents == ParentsContainer, r.call)
}

// RegisterContext creates the parents (by default CONTAINER nodes, as
// Curator does, and PERSISTENT ones with PlainCodec; see ParentMode) and
// the instance's node, then keeps it registered, with the wanted status,
// until DeregisterContext. When another live session holds the node, it
// waits for that node to go until ctx ends, then returns a *ConflictError;
// a persistent node at the path is refused at once (ErrPersistentNode).
// Calling it while registered is a no-op.
func (r *Registrar) RegisterContext(ctx context.Context) error {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	r.mu.Lock()
	registered := r.registered
	r.mu.Unlock()
	if registered {
		return nil
	}
	// A call of the previous registration may still be under way (its
	// Deregister's ctx ended first): it must not land amid this one.
	if err := r.waitCalls(ctx); err != nil {
		return fmt.Errorf("sd: register %s: a ZooKeeper call of the previous registration is still under way: %w", r.path, err)
	}
	var (
		parents bool            // made once; ensure re-makes them if reaped
		watch   <-chan zk.Event // armed once, re-armed only after it fired
		held    *ConflictError  // the last holder read: the answer when ctx ends
	)
	for {
		var err error
		if !parents {
			err = r.ensureParents(ctx)
			parents = err == nil
		}
		if err == nil {
			err = r.ensure(ctx)
		}
		if err == nil {
			break
		}
		var conflict *ConflictError
		if errors.As(err, &conflict) {
			held = conflict
		}
		// ctx can end amid a later try (its read then returns ctx's
		// error): the caller is still owed the conflict read before.
		if held != nil && ctx.Err() != nil {
			return fmt.Errorf("sd: register %s: %w (%w)", r.path, held, ctx.Err())
		}
		// A connection lost under the parents' creates is waited out as
		// one lost under the node's; an ensemble that never answered is
		// not.
		if neverConnected(err) || conflict == nil && !isTransient(err) {
			return err
		}
		// Wait for the holder's node to go (or the connection to return).
		if watch == nil {
			_ = r.call(ctx, func() error {
				_, _, ch, werr := r.c.zk().ExistsW(r.c.full(r.path))
				if werr == nil {
					watch = ch
				}
				return werr
			})
		}
		woke, cerr := retryPause(ctx, watch)
		if cerr != nil {
			if held != nil {
				err = held
			}
			return fmt.Errorf("sd: register %s: %w (%w)", r.path, err, cerr)
		}
		if woke {
			watch = nil
		}
	}
	r.mu.Lock()
	r.registered = true
	r.mu.Unlock()
	r.startKeeper()
	return nil
}

func isTransient(err error) bool {
	// go-zookeeper hands a request whose write failed the socket's own
	// error (a *net.OpError), not ErrConnectionClosed, and reconnects.
	var op *net.OpError
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrSessionExpired) ||
		errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrSessionMoved) || errors.As(err, &op) ||
		errors.Is(err, errNoReply)
}

// retryPause is the wait between two tries of a registration or a
// deregistration after a transient error: 250 ms, less when watch fires
// (woke), or ctx's error when it ends first.
func retryPause(ctx context.Context, watch <-chan zk.Event) (woke bool, err error) {
	t := time.NewTimer(250 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-watch:
		return true, nil
	case <-t.C:
		return false, nil
	}
}

// errNoReply is a call's error when its reply did not come within
// replyLimit on a connection that stayed up.
var errNoReply = errors.New("sd: no reply from ZooKeeper")

// replyLimit is how long a call waits for its reply: twice the session
// timeout. A live connection answers far sooner, and one that died is
// closed by go-zookeeper within the session timeout (its requests then
// fail); a reply lost on a connection kept alive by its pings would
// otherwise hold the keeper, and every status change and drain it
// writes, for as long as that connection lives.
func (r *Registrar) replyLimit() time.Duration { return max(2*r.c.SessionTimeout(), 2*time.Second) }

// call runs a ZooKeeper call of this Registrar and returns its error, or
// ctx's when ctx ends first, or errNoReply after replyLimit. The call is
// counted until it returns or replyLimit passes, even when abandoned at
// ctx's end, so that the next registration (or the deregistration) can
// wait for it; one past replyLimit is not: the server answers a session's
// requests in order, and a connection that lived that long had its later
// pings answered, so the call has landed.
func (r *Registrar) call(ctx context.Context, fn func() error) error {
	if err := r.c.awaitSettled(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	r.calls++
	if r.quiet == nil {
		r.quiet = make(chan struct{})
	}
	r.mu.Unlock()
	var once sync.Once // the call's end, or replyLimit's
	uncount := func() {
		once.Do(func() {
			r.mu.Lock()
			r.calls--
			if r.calls == 0 {
				close(r.quiet)
				r.quiet = nil
			}
			r.mu.Unlock()
		})
	}
	done := make(chan error, 1)
	go func() {
		defer uncount()
		done <- fn()
	}()
	d := r.replyLimit()
	limit := make(chan struct{})
	// A timer of its own, not the select's: a call abandoned at ctx's end
	// (a stopped keeper's) whose reply never comes would otherwise stay
	// counted, and hold the deregistration, for as long as the
	// connection lives.
	t := time.AfterFunc(d, func() {
		uncount()
		close(limit)
	})
	select {
	case err := <-done:
		t.Stop()
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-limit:
		return fmt.Errorf("%w within %v", errNoReply, d)
	}
}

// waitCalls waits until no call of this Registrar is under way, or ctx ends.
func (r *Registrar) waitCalls(ctx context.Context) error {
	r.mu.Lock()
	quiet := r.quiet
	r.mu.Unlock()
	if quiet == nil {
		return nil
	}
	select {
	case <-quiet:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ensure makes sure our node exists in the current session. It reads the
// node's ephemeralOwner before anything else: a node of ours is kept as is
// (no delete and re-create, so watchers see no flap), a node of another
// live session is a conflict.
func (r *Registrar) ensure(ctx context.Context) error {
	full := r.c.full(r.path)
	if err := r.c.awaitSettled(ctx); err != nil {
		return err // errNoServer when no server ever answered
	}
	if r.wantsAbsent() {
		return r.ensureAbsent(ctx)
	}
	session := r.c.SessionID()
	if session == 0 {
		// Between an expiry and the next session: our own new node could
		// look like another session's.
		return fmt.Errorf("sd: register %s: %w", r.path, zk.ErrConnectionClosed)
	}
	var stat *zk.Stat
	var cur []byte
	err := r.call(ctx, func() (err error) { cur, stat, err = r.c.zk().Get(full); return err })
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err == nil && stat.EphemeralOwner == session:
		r.mu.Lock()
		r.czxid, r.session, r.lastCzxid = stat.Czxid, session, stat.Czxid
		if !r.stamped {
			// Ours, though no create of ours was answered (its reply was
			// lost): the time is the one it carries.
			r.inst.RegistrationTime, r.stamped = time.Now().Truncate(time.Millisecond), true
			if inst, err := r.codec.Decode(r.inst.Name, path.Base(r.path), cur); err == nil && !inst.RegistrationTime.IsZero() {
				r.inst.RegistrationTime = inst.RegistrationTime
			}
		}
		r.mu.Unlock()
		return nil
	case err == nil:
		return r.heldBy(stat)
	case !errors.Is(err, zk.ErrNoNode):
		return fmt.Errorf("sd: read %s: %w", r.path, err)
	}
	r.mu.Lock()
	inst := r.inst.clone() // SetStatus may write Metadata meanwhile
	if !r.stamped {
		// Milliseconds, as registrationTimeUTC carries it: Instance says
		// what the node says. Kept once a create lands.
		inst.RegistrationTime = time.Now().Truncate(time.Millisecond)
	}
	if r.drainedBy != "" {
		// Drained: the operator's word outlives the node it was written in.
		inst.Metadata[MetadataDrainedBy] = r.drainedBy
		inst.Metadata[MetadataDrainedStatus] = string(inst.Status())
		inst.Metadata[MetadataStatus] = string(StatusOutOfService)
	}
	want := r.want
	before := r.czxid
	r.mu.Unlock()
	data, err := r.codec.Encode(inst)
	if err != nil {
		return err
	}
	err = r.call(ctx, func() error { _, err := r.c.zk().Create(full, data, zk.FlagEphemeral, r.c.acl); return err })
	inject(fpRegisterAfterCreate)
	if err != nil {
		if errors.Is(err, zk.ErrNoNode) { // the container parent was reaped meanwhile
			if perr := r.ensureParents(ctx); perr != nil {
				return perr
			}
			return fmt.Errorf("sd: create %s: %w", r.path, zk.ErrConnectionClosed)
		}
		if errors.Is(err, zk.ErrNodeExists) {
			return r.ensure(ctx)
		}
		return fmt.Errorf("sd: create %s: %w", r.path, err)
	}
	err = r.call(ctx, func() (err error) { _, stat, err = r.c.zk().Exists(full); return err })
	if err != nil {
		return fmt.Errorf("sd: read %s: %w", r.path, err)
	}
	r.mu.Lock()
	r.czxid, r.session, r.lastCzxid = stat.Czxid, session, stat.Czxid
	if !r.stamped {
		r.inst.RegistrationTime, r.stamped = inst.RegistrationTime, true
	}
	r.mu.Unlock()
	r.markWrote(want)
	kind := EventRegistered
	if before != 0 {
		kind = EventReregistered
	}
	r.logger.Info(string(kind), "session", zkconn.HexSession(session), "czxid", stat.Czxid)
	r.emit(RegistrarEvent{Kind: kind, Path: r.path, SessionID: session, Czxid: stat.Czxid})
	return nil
}

// wantsAbsent tells whether the node should not exist: its codec stores
// no status, and the wanted one is OUT_OF_SERVICE.
func (r *Registrar) wantsAbsent() bool {
	if !r.absent {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inst.Status() == StatusOutOfService
}

// ensureAbsent deletes our node, if the current session owns one: with a
// codec that stores no status, that is how the instance leaves rotation.
// A node of another session is not ours to delete, and is left.
func (r *Registrar) ensureAbsent(ctx context.Context) error {
	full := r.c.full(r.path)
	session := r.c.SessionID()
	if session == 0 {
		return fmt.Errorf("sd: withdraw %s: %w", r.path, zk.ErrConnectionClosed)
	}
	var ok bool
	var stat *zk.Stat
	err := r.call(ctx, func() (err error) { ok, stat, err = r.c.zk().Exists(full); return err })
	if err != nil {
		return fmt.Errorf("sd: read %s: %w", r.path, err)
	}
	if !ok || stat.EphemeralOwner != session {
		return nil
	}
	err = r.call(ctx, func() error { return r.c.zk().Delete(full, stat.Version) })
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return nil
	case errors.Is(err, zk.ErrBadVersion):
		return r.ensureAbsent(ctx) // our own write landed meanwhile
	case err != nil:
		return fmt.Errorf("sd: withdraw %s: %w", r.path, err)
	}
	r.logger.Info(string(EventWithdrawn), "session", zkconn.HexSession(session), "czxid", stat.Czxid)
	r.emit(RegistrarEvent{Kind: EventWithdrawn, Path: r.path, SessionID: session, Czxid: stat.Czxid})
	return nil
}

func (r *Registrar) emit(ev RegistrarEvent) {
	if r.opts.onEvent != nil {
		r.opts.onEvent(ev)
	}
}

// markWrote records that ZooKeeper holds want and wakes SetStatus callers.
func (r *Registrar) markWrote(want uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if want > r.wrote {
		r.wrote = want
	}
	r.lastErr = nil
	close(r.converged)
	r.converged = make(chan struct{})
}

// startKeeper runs the goroutine that owns the node. r.runMu must be held.
func (r *Registrar) startKeeper() {
	ctx, cancel := context.WithCancel(context.Background())
	kick := make(chan struct{}, 1)
	r.kcancel, r.kdone = cancel, make(chan struct{})
	r.mu.Lock()
	r.kick = kick
	r.mu.Unlock()
	sess := make(chan struct{}, 1)
	r.unsubs = r.c.subscribe(func(ev SessionEvent) {
		// A new connection, same session or not: check the node and write
		// what a disconnect kept from landing.
		if ev.State == StateHasSession || ev.State == StateExpired {
			select {
			case sess <- struct{}{}:
			default:
			}
		}
	})
	go r.keep(ctx, r.kdone, kick, sess)
}

// poke wakes the keeper. It reads kick under r.mu, not r.runMu, which a
// DeregisterContext waiting out a lost connection holds until its ctx ends.
func (r *Registrar) poke() {
	r.mu.Lock()
	kick := r.kick
	r.mu.Unlock()
	if kick == nil {
		return
	}
	select {
	case kick <- struct{}{}:
	default:
	}
}

// stopKeeper stops the keeper and waits for it. It returns promptly: the
// keeper's ZooKeeper calls give up at its ctx (they may still be under way:
// see waitCalls). r.runMu must be held.
func (r *Registrar) stopKeeper() {
	if r.kcancel == nil {
		return
	}
	r.unsubs()
	r.kcancel()
	<-r.kdone
	r.kcancel, r.kdone = nil, nil
	r.mu.Lock()
	r.kick = nil
	r.mu.Unlock()
}

// keep is the keeper's loop. kick (SetStatus) and sess (a new connection)
// wake it at once.
func (r *Registrar) keep(ctx context.Context, done, kick, sess chan struct{}) {
	defer close(done)
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval = 100*time.Millisecond, 5*time.Second
	var watch <-chan zk.Event // re-armed only after it fired: watchers do not pile up
	for {
		err := r.reconcile(ctx, &watch)
		if ctx.Err() != nil {
			return
		}
		var timer *time.Timer
		var wait <-chan time.Time
		if err != nil {
			r.mu.Lock()
			r.lastErr = err
			r.mu.Unlock()
			r.logger.Warn("keeping registration failed", "err", err)
			r.emit(RegistrarEvent{Kind: EventRegisterFailed, Path: r.path, SessionID: r.c.SessionID(), Err: err})
			timer = time.NewTimer(bo.NextBackOff())
			wait = timer.C
		} else {
			bo.Reset()
		}
		closed := false
		select {
		case <-ctx.Done():
		case <-r.c.Done(): // the session is gone with its client: nothing to keep
			closed = true
		case <-watch:
			watch = nil
		case <-kick:
		case <-sess: // its calls wait for the connection to settle (awaitSettled)
		case <-wait:
		}
		if timer != nil {
			timer.Stop()
		}
		if closed || ctx.Err() != nil {
			return
		}
	}
}

// reconcile makes ZooKeeper hold what the Registrar wants: the node, in
// the current session, with the wanted status.
func (r *Registrar) reconcile(ctx context.Context, watch *<-chan zk.Event) error {
	if !r.c.ownConnected() {
		// A write queued now would land whenever the connection returns,
		// maybe after Deregister; the reconnect kicks the keeper.
		return fmt.Errorf("sd: keep %s: %w", r.path, zk.ErrConnectionClosed)
	}
	if *watch == nil {
		err := r.call(ctx, func() error {
			_, _, ch, err := r.c.zk().ExistsW(r.c.full(r.path))
			if err == nil {
				*watch = ch
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("sd: watch %s: %w", r.path, err)
		}
	}
	if r.absent {
		// Nothing to write in the node: its existence is the status.
		r.mu.Lock()
		want := r.want
		r.mu.Unlock()
		if err := r.ensure(ctx); err != nil {
			return err
		}
		r.markWrote(want)
		return nil
	}
	if err := r.ensure(ctx); err != nil {
		return err
	}
	return r.writeStatus(ctx)
}

// writeStatus writes the wanted status into our node with a
// version-checked setData, keeping every other field, unless it is there.
func (r *Registrar) writeStatus(ctx context.Context) error {
	full := r.c.full(r.path)
	for attempt := 0; ; attempt++ {
		r.mu.Lock()
		want, status, outBy := r.want, r.inst.Status(), r.inst.Metadata[MetadataOutBy]
		r.mu.Unlock()
		var data []byte
		var stat *zk.Stat
		err := r.call(ctx, func() (err error) { data, stat, err = r.c.zk().Get(full); return err })
		if err != nil {
			return fmt.Errorf("sd: set status of %s: %w", r.path, err)
		}
		if stat.EphemeralOwner != r.c.SessionID() {
			return r.heldBy(stat)
		}
		cur, err := r.codec.Decode(r.inst.Name, path.Base(r.path), data)
		drainedStatus := ""
		if err == nil {
			// The node says whether an operator drained it.
			by := cur.Metadata[MetadataDrainedBy]
			r.mu.Lock()
			prev := r.drainedBy
			r.drainedBy = by
			r.mu.Unlock()
			if by != prev {
				kind := EventDrained
				if by == "" {
					kind = EventUndrained
				}
				if by == "" {
					r.logger.Info(string(kind), "was", prev) // undrained: who had drained it
				} else {
					r.logger.Info(string(kind), "by", by)
				}
				r.emit(RegistrarEvent{Kind: kind, Path: r.path, SessionID: stat.EphemeralOwner, Czxid: stat.Czxid, DrainedBy: by})
			}
			if by != "" {
				// The status to restore at the undrain is the owner's.
				drainedStatus, status = string(status), StatusOutOfService
			}
		}
		if err == nil && cur.Status() == status && cur.Metadata[MetadataOutBy] == outBy &&
			cur.Metadata[MetadataDrainedStatus] == drainedStatus {
			r.markWrote(want)
			return nil
		}
		if err != nil {
			// Our node, unreadable (a hand edit, a foreign writer): rewrite
			// it whole, with the drain last seen on it, which only an
			// undrain ends, as ensure keeps it in a node it re-creates.
			cur = r.Instance()
			r.mu.Lock()
			by := r.drainedBy
			r.mu.Unlock()
			if by != "" {
				cur.Metadata[MetadataDrainedBy] = by
				drainedStatus, status = string(status), StatusOutOfService
			}
		}
		if cur.Metadata == nil {
			cur.Metadata = map[string]string{}
		}
		cur.Metadata[MetadataStatus] = string(status)
		if outBy != "" {
			cur.Metadata[MetadataOutBy] = outBy
		} else {
			delete(cur.Metadata, MetadataOutBy)
		}
		if drainedStatus != "" {
			cur.Metadata[MetadataDrainedStatus] = drainedStatus
		} else {
			delete(cur.Metadata, MetadataDrainedStatus)
		}
		out, err := r.codec.Encode(cur)
		if err != nil {
			return err
		}
		err = r.call(ctx, func() error { _, err := r.c.zk().Set(full, out, stat.Version); return err })
		if errors.Is(err, zk.ErrBadVersion) && attempt < 5 {
			continue
		}
		if err != nil {
			return fmt.Errorf("sd: set status of %s: %w", r.path, err)
		}
		r.markWrote(want)
		r.emit(RegistrarEvent{Kind: EventStatusSet, Path: r.path, SessionID: stat.EphemeralOwner, Czxid: stat.Czxid})
		return nil
	}
}

// SetStatus makes status the wanted one and waits until ZooKeeper holds
// it (a version-checked setData that keeps every other field) or ctx ends.
// OUT_OF_SERVICE hides the instance from readers without removing it.
// With a codec that stores no status (PlainCodec, GoKitCodec: see
// StoresStatus), out of rotation is absence: OUT_OF_SERVICE deletes the
// node and UP creates it again, one write each, and an operator's drain
// cannot be written in it. When
// ctx ends first, the Registrar keeps writing it, after any disconnect or
// expiry, until DeregisterContext. Before Register it returns
// ErrNotRegistered, and Register writes the status; after the Client's
// Close, ErrClosed. UP removes the MetadataOutBy mark of SetStatusBy;
// OUT_OF_SERVICE keeps it.
func (r *Registrar) SetStatus(ctx context.Context, status Status) error {
	return r.setStatus(ctx, status, "", true)
}

// SetStatusBy is SetStatus that also records who takes the instance out:
// by (OutByHealth for the health check) goes into MetadataOutBy in the
// same setData as the status, and UP (by "") removes it. The mark is only
// a record: an operator's drain (MetadataDrainedBy) still holds the node
// OUT_OF_SERVICE, and the mark never does.
func (r *Registrar) SetStatusBy(ctx context.Context, status Status, by string) error {
	if status == StatusUp && by != "" {
		return &ConfigError{"out_by", by, "empty with UP"}
	}
	return r.setStatus(ctx, status, by, false)
}

func (r *Registrar) setStatus(ctx context.Context, status Status, by string, keepBy bool) error {
	if status != StatusUp && status != StatusOutOfService {
		return &ConfigError{"status", string(status), "UP or OUT_OF_SERVICE"}
	}
	r.mu.Lock()
	r.inst.Metadata[MetadataStatus] = string(status)
	switch {
	case by != "":
		r.inst.Metadata[MetadataOutBy] = by
	case !keepBy || status == StatusUp:
		delete(r.inst.Metadata, MetadataOutBy)
	}
	r.want++
	want := r.want
	r.mu.Unlock()
	r.poke()
	for {
		r.mu.Lock()
		registered, wrote, ch, lastErr := r.registered, r.wrote, r.converged, r.lastErr
		r.mu.Unlock()
		switch {
		case !registered:
			return ErrNotRegistered
		case wrote >= want:
			return nil
		}
		select {
		case <-ch:
		case <-r.c.Done():
			// The keeper ended with the session: nothing keeps trying.
			return fmt.Errorf("sd: set status of %s to %s: the Client was closed, and its session with the node: %w", r.path, status, ErrClosed)
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("sd: set status of %s to %s: %w (%w; the Registrar keeps trying)", r.path, status, ctx.Err(), lastErr)
			}
			return fmt.Errorf("sd: set status of %s to %s: %w (the Registrar keeps trying)", r.path, status, ctx.Err())
		}
	}
}

// DeregisterContext stops keeping the node and deletes it, only if the
// current session owns it. It is idempotent: a missing node is success. A
// connection lost under it is waited out until ctx ends.
// When it returns nil, nothing of this registration writes to ZooKeeper
// again. When ctx ends first it returns an error; a call already sent may
// then still land, and closing the session removes the node anyway.
func (r *Registrar) DeregisterContext(ctx context.Context) error {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	r.mu.Lock()
	r.registered = false
	r.czxid = 0
	close(r.converged) // SetStatus callers see it
	r.converged = make(chan struct{})
	r.mu.Unlock()
	r.stopKeeper()
	if err := r.waitCalls(ctx); err != nil {
		return fmt.Errorf("sd: deregister %s: a ZooKeeper call is still under way: %w", r.path, err)
	}
	full := r.c.full(r.path)
	// A lost connection (or a call without reply) is waited out within
	// ctx, as RegisterContext waits it out: the session, or its expiry,
	// decides what is left to delete. A delete whose reply was lost is
	// seen as done by the next Exists.
	failed := func(err error) error {
		if neverConnected(err) || !isTransient(err) {
			return fmt.Errorf("sd: deregister %s: %w", r.path, err)
		}
		if _, cerr := retryPause(ctx, nil); cerr != nil {
			return fmt.Errorf("sd: deregister %s: %w (%w)", r.path, err, cerr)
		}
		return nil
	}
	var sent *zk.Stat // the node a delete without reply was sent for
	deleted := func(stat *zk.Stat) error {
		r.logger.Info("deregistered")
		r.emit(RegistrarEvent{Kind: EventDeregistered, Path: r.path, SessionID: stat.EphemeralOwner, Czxid: stat.Czxid})
		return nil
	}
	for {
		var ok bool
		var stat *zk.Stat
		err := r.call(ctx, func() (err error) { ok, stat, err = r.c.zk().Exists(full); return err })
		if err != nil {
			if err := failed(err); err != nil {
				return err
			}
			continue
		}
		if !ok || stat.EphemeralOwner != r.c.SessionID() {
			if sent != nil && sent.EphemeralOwner == r.c.SessionID() {
				return deleted(sent) // the delete landed: its reply was lost
			}
			return nil // gone, or another session's: not ours to delete
		}
		inject(fpDeregisterBeforeDelete)
		err = r.call(ctx, func() error { return r.c.zk().Delete(full, stat.Version) })
		if errors.Is(err, zk.ErrBadVersion) {
			continue
		}
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			if errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, errNoReply) {
				sent = stat // sent, its fate unknown
			}
			if err := failed(err); err != nil {
				return err
			}
			continue
		}
		return deleted(stat)
	}
}
