package shutdown

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-kit/kit/metrics"
)

// Defaults of the Notifier and Handler options.
const (
	DefaultRetryMax        = 3
	DefaultRetryWaitMin    = 50 * time.Millisecond
	DefaultRetryWaitMax    = 500 * time.Millisecond
	DefaultAttemptTimeout  = time.Second
	DefaultTimestampWindow = 30 * time.Second
	DefaultMaxBodyBytes    = 4 << 10
	DefaultNonceCacheSize  = 4096
)

// Option configures a Notifier or a Handler. Each option says which
// constructor it applies to; passing it to another is an error.
type Option interface {
	apply(*options) error
}

type target int

const (
	forNotifier target = 1 << iota
	forHandler
)

func (t target) String() string {
	if t == forHandler {
		return "NewHandler"
	}
	return "NewNotifier"
}

type options struct {
	target target
	logger *slog.Logger

	// Notifier.
	static         []string
	spring         []string
	source         TargetSource
	retryMax       int
	retryWaitMin   time.Duration
	retryWaitMax   time.Duration
	attemptTimeout time.Duration
	client         *http.Client
	registration   func() int64
	flushes        metrics.Counter // see metrics.go

	// Handler.
	window    time.Duration
	maxBody   int64
	nonceSize int
	refusals  metrics.Counter
	results   metrics.Counter
}

type option struct {
	name string
	for_ target
	f    func(*options) error
}

func (o option) apply(opts *options) error {
	if o.for_&opts.target == 0 {
		return fmt.Errorf("shutdown: option %s does not apply to %s", o.name, opts.target)
	}
	return o.f(opts)
}

// WithLogger sets the logger of a Notifier or Handler; the default is
// silent. A Notifier also hands it to go-retryablehttp.
func WithLogger(l *slog.Logger) Option {
	return option{"WithLogger", forNotifier | forHandler, func(o *options) error {
		if l == nil {
			return fmt.Errorf("shutdown: nil logger")
		}
		o.logger = l
		return nil
	}}
}

// StaticTargets adds flush URLs that get a signed POST. Each must be an
// absolute http or https URL.
func StaticTargets(urls ...string) Option {
	return option{"StaticTargets", forNotifier, func(o *options) error {
		for _, u := range urls {
			if err := checkURL(u); err != nil {
				return err
			}
		}
		o.static = append(o.static, urls...)
		return nil
	}}
}

// SpringTargets adds Spring-style flush URLs, called as
// GET <url>?applicationName=<service>&host=<address>&id=<id>, unsigned, for
// Java gateways. Each must be an absolute http or https URL.
func SpringTargets(urls ...string) Option {
	return option{"SpringTargets", forNotifier, func(o *options) error {
		for _, u := range urls {
			if err := checkURL(u); err != nil {
				return err
			}
		}
		o.spring = append(o.spring, urls...)
		return nil
	}}
}

// Targets sets a source of flush URLs, asked once per Flush, whose targets
// get a signed POST like StaticTargets.
func Targets(s TargetSource) Option {
	return option{"Targets", forNotifier, func(o *options) error {
		if s == nil {
			return fmt.Errorf("shutdown: nil target source")
		}
		o.source = s
		return nil
	}}
}

// RetryMax sets how many times a failed flush call is retried, 0 to 10.
// Default DefaultRetryMax.
func RetryMax(n int) Option {
	return option{"RetryMax", forNotifier, func(o *options) error {
		if n < 0 || n > 10 {
			return fmt.Errorf("shutdown: invalid retry max %d (must be 0 to 10)", n)
		}
		o.retryMax = n
		return nil
	}}
}

// RetryWait sets the bounds of the backoff between flush attempts; the
// backoff never outlasts the flush context. Defaults DefaultRetryWaitMin and
// DefaultRetryWaitMax.
func RetryWait(min, max time.Duration) Option {
	return option{"RetryWait", forNotifier, func(o *options) error {
		if min <= 0 || max < min {
			return fmt.Errorf("shutdown: invalid retry wait %s to %s (need 0 < min <= max)", min, max)
		}
		o.retryWaitMin, o.retryWaitMax = min, max
		return nil
	}}
}

// AttemptTimeout bounds each flush attempt, so that a slow gateway leaves
// time for a retry. Default DefaultAttemptTimeout. Ignored with HTTPClient.
func AttemptTimeout(d time.Duration) Option {
	return option{"AttemptTimeout", forNotifier, func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("shutdown: invalid attempt timeout %s (must be positive)", d)
		}
		o.attemptTimeout = d
		return nil
	}}
}

// HTTPClient sets the client flush calls use, for TLS settings for example.
// Its Timeout bounds each attempt. By default the Notifier uses its own
// client and closes its idle connections after each Flush.
func HTTPClient(c *http.Client) Option {
	return option{"HTTPClient", forNotifier, func(o *options) error {
		if c == nil {
			return fmt.Errorf("shutdown: nil http client")
		}
		o.client = c
		return nil
	}}
}

// TimestampWindow sets how far a flush request's timestamp may be from the
// handler's clock, either way. Default DefaultTimestampWindow.
func TimestampWindow(d time.Duration) Option {
	return option{"TimestampWindow", forHandler, func(o *options) error {
		if d < time.Second {
			return fmt.Errorf("shutdown: invalid timestamp window %s (minimum 1s)", d)
		}
		o.window = d
		return nil
	}}
}

// MaxBodyBytes sets the largest flush request body accepted. Default
// DefaultMaxBodyBytes.
func MaxBodyBytes(n int64) Option {
	return option{"MaxBodyBytes", forHandler, func(o *options) error {
		if n < 64 {
			return fmt.Errorf("shutdown: invalid max body bytes %d (minimum 64)", n)
		}
		o.maxBody = n
		return nil
	}}
}

// NonceCacheSize sets how many recent nonces the handler remembers to refuse
// replays; when it is full the oldest is forgotten, so volume never makes
// the handler refuse a valid flush. Default DefaultNonceCacheSize.
func NonceCacheSize(n int) Option {
	return option{"NonceCacheSize", forHandler, func(o *options) error {
		if n < 1 {
			return fmt.Errorf("shutdown: invalid nonce cache size %d (minimum 1)", n)
		}
		o.nonceSize = n
		return nil
	}}
}

// Registration sets how a Notifier learns the registration it ends: czxid
// returns the creation zxid of the instance's ZooKeeper node
// (sd.Registrar.Czxid), asked once per Flush. Every signed request carries
// it, and a gateway evicts only that registration, so a replayed request
// can never end a later one. Required with StaticTargets or Targets.
func Registration(czxid func() int64) Option {
	return option{"Registration", forNotifier, func(o *options) error {
		if czxid == nil {
			return fmt.Errorf("shutdown: nil registration func")
		}
		o.registration = czxid
		return nil
	}}
}

// Refusal reasons, the "reason" label of the RefusalCounter.
const (
	ReasonMethod      = "method"       // 405: not a POST
	ReasonContentType = "content-type" // 415: not application/json
	ReasonTooLarge    = "too-large"    // 413: body over MaxBodyBytes
	ReasonUnreadable  = "unreadable"   // 400: the body could not be read
	ReasonUnsigned    = "unsigned"     // 401: signature headers missing or malformed
	ReasonForged      = "forged"       // 401: wrong signature
	ReasonStale       = "stale"        // 401: timestamp outside TimestampWindow
	ReasonAudience    = "audience"     // 401: target is not one of the handler's audiences
	ReasonReplay      = "replay"       // 401: nonce seen before
	ReasonMalformed   = "malformed"    // 400: body is not a valid FlushRequest
	ReasonEvictFailed = "evict-failed" // 500: the Evicter returned an error
)

// RefusalCounter counts the requests a Handler refuses, with a "reason"
// label (ReasonMethod and the other Reason constants). Refusals are also
// logged, at most one line per reason per second; the counter has them all.
func RefusalCounter(c metrics.Counter) Option {
	return option{"RefusalCounter", forHandler, func(o *options) error {
		if c == nil {
			return fmt.Errorf("shutdown: nil refusal counter")
		}
		o.refusals = c
		return nil
	}}
}

// ResultCounter counts the flush requests a Handler acknowledged, with a
// "result" label: a Result (evicted, not-listed, other-registration,
// not-routed).
func ResultCounter(c metrics.Counter) Option {
	return option{"ResultCounter", forHandler, func(o *options) error {
		if c == nil {
			return fmt.Errorf("shutdown: nil result counter")
		}
		o.results = c
		return nil
	}}
}

func newOptions(t target, opts []Option) (*options, error) {
	o := &options{
		target:         t,
		retryMax:       DefaultRetryMax,
		retryWaitMin:   DefaultRetryWaitMin,
		retryWaitMax:   DefaultRetryWaitMax,
		attemptTimeout: DefaultAttemptTimeout,
		window:         DefaultTimestampWindow,
		maxBody:        DefaultMaxBodyBytes,
		nonceSize:      DefaultNonceCacheSize,
	}
	for _, opt := range opts {
		if err := opt.apply(o); err != nil {
			return nil, err
		}
	}
	return o, nil
}
