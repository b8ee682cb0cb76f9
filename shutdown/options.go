package shutdown

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"
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

	// Handler.
	window    time.Duration
	maxBody   int64
	nonceSize int
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
// replays. Default DefaultNonceCacheSize.
func NonceCacheSize(n int) Option {
	return option{"NonceCacheSize", forHandler, func(o *options) error {
		if n < 1 {
			return fmt.Errorf("shutdown: invalid nonce cache size %d (minimum 1)", n)
		}
		o.nonceSize = n
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
