package grpcresolver

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/resolver"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown/flush"
)

// Builder defaults.
const (
	// DefaultScheme is the target scheme a Builder serves: gracekit:///quote.
	DefaultScheme = "gracekit"
	// DefaultLoadTimeout bounds each attempt at the first load of a
	// service; after it the error is reported and the load tried again.
	DefaultLoadTimeout = 5 * time.Second
	// DefaultRecoveryHold is how long an empty set that arrives right after
	// a discovery error is held back (see RecoveryHold).
	DefaultRecoveryHold = 5 * time.Second
)

// Option configures a Builder.
type Option interface{ apply(*options) error }

type options struct {
	scheme       string
	logger       *slog.Logger
	loadTimeout  time.Duration
	recoveryHold time.Duration
}

type optionFunc func(*options) error

func (f optionFunc) apply(o *options) error { return f(o) }

// WithScheme sets the target scheme (default "gracekit"): lower case
// letters, digits, '+', '-' and '.', starting with a letter, as RFC 3986
// says and grpc-go matches.
func WithScheme(s string) Option {
	return optionFunc(func(o *options) error {
		if !validScheme(s) {
			return fmt.Errorf("grpcresolver: invalid scheme %q (want a lower case letter, then lower case letters, digits, '+', '-' or '.')", s)
		}
		o.scheme = s
		return nil
	})
}

// WithLogger sets the logger (default: silent).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) error {
		if l == nil {
			return fmt.Errorf("grpcresolver: nil logger")
		}
		o.logger = l
		return nil
	})
}

// LoadTimeout bounds each attempt at a service's first load (default 5 s,
// minimum 1 ms; longer than the consumer's snapshot start wait, when it
// keeps a snapshot: consumer.WithSnapshot). A resolver that could not load its service within it
// reports the error to its ClientConn, which fails RPCs that do not wait
// for ready, and tries again with a backoff.
func LoadTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d < time.Millisecond {
			return fmt.Errorf("grpcresolver: invalid load timeout %v (minimum 1ms)", d)
		}
		o.loadTimeout = d
		return nil
	})
}

// RecoveryHold is how long after a discovery error cleared an empty set is
// not believed (default 5 s; 0 believes it at once). When ZooKeeper comes
// back after an outage, providers whose sessions expired meanwhile
// register again a moment after the Instancer read their service empty;
// pushing that empty set would fail every RPC in between. A service that
// is still empty after the hold is pushed empty. Outside the hold an empty
// set read without error is pushed at once.
func RecoveryHold(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d < 0 {
			return fmt.Errorf("grpcresolver: invalid recovery hold %v (minimum 0)", d)
		}
		o.recoveryHold = d
		return nil
	})
}

func validScheme(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '+', r == '-', r == '.':
		default:
			return false
		}
	}
	return true
}

var _ resolver.Builder = (*Builder)(nil)

// Builder is a grpc-go resolver.Builder over a consumer.Consumer: a target
// "gracekit:///quote" resolves to the instances of service quote, from the
// consumer's shared Instancer of that service. The ZooKeeper ensemble is
// the consumer's: it belongs in the Builder, not in the target (Go 1.26
// rejects commas in a URL authority), so a target with an authority is an
// error. Give it to grpc.NewClient with grpc.WithResolvers, or register it
// with resolver.Register. It is safe for concurrent use.
type Builder struct {
	c    *consumer.Consumer
	opts options
	log  *slog.Logger

	mu      sync.Mutex
	watched map[string]*watched // services some resolver watches now
}

// watched is a service's Instancer and how many resolvers watch it.
type watched struct {
	in *sd.Instancer
	n  int
}

// NewBuilder returns a Builder over c. c must be started before the first
// RPC (or Connect) of a ClientConn that uses the Builder, and stopped after
// the last such ClientConn closed: a stopped Consumer's Instancers publish
// nothing more, so its resolvers keep their last set.
func NewBuilder(c *consumer.Consumer, opts ...Option) (*Builder, error) {
	if c == nil {
		return nil, fmt.Errorf("grpcresolver: nil consumer (want one from consumer.New)")
	}
	o := options{
		scheme: DefaultScheme, logger: slog.New(slog.DiscardHandler),
		loadTimeout: DefaultLoadTimeout, recoveryHold: DefaultRecoveryHold,
	}
	for _, opt := range opts {
		if err := opt.apply(&o); err != nil {
			return nil, err
		}
	}
	if w := c.SnapshotStartWait(); w > 0 && o.loadTimeout <= w {
		// Each attempt would end before the snapshot is served.
		return nil, fmt.Errorf("grpcresolver: invalid load timeout %v (must be longer than the consumer's snapshot start wait, %v, or ClientConns never resolve from the snapshot)", o.loadTimeout, w)
	}
	return &Builder{c: c, opts: o, log: o.logger.With("component", "grpcresolver"), watched: map[string]*watched{}}, nil
}

// Scheme implements resolver.Builder.
func (b *Builder) Scheme() string { return b.opts.scheme }

// Build implements resolver.Builder. It checks the target and returns at
// once: the resolver loads the service in a goroutine of its own, which
// Close stops, so that a first load that waits for ZooKeeper does not hold
// up grpc-go (which calls Build on a ClientConn's first RPC or Connect).
// A target that names no service, or has an authority, gets a
// *TargetError.
func (b *Builder) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	name, err := ServiceName(target)
	if err != nil {
		return nil, err
	}
	return newResolver(b, name, cc), nil
}

// Evicter is the flush.EvicterLookup of a gateway that routes gRPC through
// this Builder: the consumer's own Evicter when the consumer built
// endpoints for service (it evicts from the Instancer and those
// endpoints), otherwise, while a resolver watches service, an Evicter of
// the registration at the service's Instancer (flush.DiscoveryEvicter),
// whose new set every resolver over it pushes before the next pick.
// Resolvers read their Instancers through consumer.RoutedInstancer, so the
// consumer's own lookup (consumer.FlushHandler, fxmodule.Gateway) routes
// those services too; this one is kept for callers that use it.
func (b *Builder) Evicter(service string) (flush.Evicter, bool) {
	if ev, ok := b.c.Evicter(service); ok {
		return ev, true
	}
	b.mu.Lock()
	w, ok := b.watched[service]
	b.mu.Unlock()
	if !ok {
		return nil, false
	}
	return flush.DiscoveryEvicter(w.in), true
}

// FlushHandler is consumer.FlushHandler with Evicter as its lookup: the
// flush receiver of a gateway that routes gRPC through this Builder, with
// or without go-kit endpoints.
func (b *Builder) FlushHandler(secret []byte, audiences []string, opts ...flush.HandlerOption) (*flush.Handler, error) {
	h, err := flush.NewHandler(secret, audiences, b.Evicter, append([]flush.HandlerOption{flush.WithLogger(b.opts.logger)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("grpcresolver: flush handler: %w", err)
	}
	return h, nil
}

func (b *Builder) watch(service string, in *sd.Instancer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.watched[service]
	if w == nil {
		w = &watched{in: in}
		b.watched[service] = w
	}
	w.in = in // a consumer stopped and restarted hands out a new one
	w.n++
}

func (b *Builder) unwatch(service string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w := b.watched[service]; w != nil {
		if w.n--; w.n == 0 {
			delete(b.watched, service)
		}
	}
}

// TargetError is the error of a target the Builder cannot resolve.
type TargetError struct {
	Target string
	Reason string
}

func (e *TargetError) Error() string {
	return fmt.Sprintf("grpcresolver: target %q: %s", e.Target, e.Reason)
}

// ServiceName returns the service a target names: "quote" for
// gracekit:///quote (or gracekit:quote). A target without a service name,
// with an authority (the ensemble belongs in the Builder), with a '/' in
// the name, a query or a fragment gets a *TargetError.
func ServiceName(target resolver.Target) (string, error) {
	u := target.URL
	raw := u.String()
	switch {
	case u.Host != "" || u.User != nil:
		return "", &TargetError{raw, fmt.Sprintf("has an authority (%q): the ZooKeeper ensemble belongs in the Builder; write %s:///<service>", u.Host, u.Scheme)}
	case u.RawQuery != "" || u.ForceQuery:
		return "", &TargetError{raw, "has a query, which the resolver does not read"}
	case u.Fragment != "":
		return "", &TargetError{raw, "has a fragment, which the resolver does not read"}
	}
	name := target.Endpoint()
	switch {
	case name == "":
		return "", &TargetError{raw, fmt.Sprintf("names no service; write %s:///<service>", u.Scheme)}
	case !sd.ValidNodeName(name):
		return "", &TargetError{raw, fmt.Sprintf("service name %q is not one znode name (no '/', not . or ..)", name)}
	}
	return name, nil
}
