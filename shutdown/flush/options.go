package flush

import (
	"errors"
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

// NotifierOption configures a Notifier; pass it to NewNotifier.
type NotifierOption interface {
	applyNotifier(*notifierOptions) error
}

// HandlerOption configures a Handler; pass it to NewHandler.
type HandlerOption interface {
	applyHandler(*handlerOptions) error
}

// Option configures a Notifier or a Handler: it is both a NotifierOption
// and a HandlerOption.
type Option interface {
	NotifierOption
	HandlerOption
}

type notifierOptions struct {
	logger         *slog.Logger
	static         []string
	spring         []string
	source         TargetSource
	retryMax       int
	retryWaitMin   time.Duration
	retryWaitMax   time.Duration
	attemptTimeout time.Duration
	client         *http.Client
	registration   func() int64
	calls          metrics.Counter // see metrics.go
}

type handlerOptions struct {
	logger    *slog.Logger
	window    time.Duration
	maxBody   int64
	nonceSize int
	refusals  metrics.Counter
	results   metrics.Counter
}

// notifierOption is a NotifierOption that is not also a HandlerOption.
type notifierOption func(*notifierOptions) error

func (f notifierOption) applyNotifier(o *notifierOptions) error { return f(o) }

// handlerOption is a HandlerOption that is not also a NotifierOption.
type handlerOption func(*handlerOptions) error

func (f handlerOption) applyHandler(o *handlerOptions) error { return f(o) }

type loggerOption struct{ l *slog.Logger }

func (o loggerOption) check() error {
	if o.l == nil {
		return errors.New("flush: nil logger")
	}
	return nil
}

func (o loggerOption) applyNotifier(n *notifierOptions) error {
	n.logger = o.l
	return o.check()
}

func (o loggerOption) applyHandler(h *handlerOptions) error {
	h.logger = o.l
	return o.check()
}

// WithLogger sets the logger of a Notifier or Handler; the default is
// silent. A Notifier also hands it to go-retryablehttp.
func WithLogger(l *slog.Logger) Option { return loggerOption{l} }

// StaticTargets adds flush URLs that get a signed POST. Each must be an
// absolute http or https URL.
func StaticTargets(urls ...string) NotifierOption {
	return notifierOption(func(o *notifierOptions) error {
		for _, u := range urls {
			if err := checkURL(u); err != nil {
				return err
			}
		}
		o.static = append(o.static, urls...)
		return nil
	})
}

// SpringTargets adds Spring-style flush URLs, called as
// GET <url>?applicationName=<service>&host=<address>&id=<id>, unsigned, for
// Java gateways. Each must be an absolute http or https URL.
func SpringTargets(urls ...string) NotifierOption {
	return notifierOption(func(o *notifierOptions) error {
		for _, u := range urls {
			if err := checkURL(u); err != nil {
				return err
			}
		}
		o.spring = append(o.spring, urls...)
		return nil
	})
}

// Targets sets a source of flush URLs, asked once per Flush, whose targets
// get a signed POST like StaticTargets.
func Targets(s TargetSource) NotifierOption {
	return notifierOption(func(o *notifierOptions) error {
		if s == nil {
			return fmt.Errorf("flush: nil target source")
		}
		o.source = s
		return nil
	})
}

// RetryMax sets how many times a failed flush call is retried, 0 to 10.
// Default DefaultRetryMax.
func RetryMax(n int) NotifierOption {
	return notifierOption(func(o *notifierOptions) error {
		if n < 0 || n > 10 {
			return fmt.Errorf("flush: invalid retry max %d (must be 0 to 10)", n)
		}
		o.retryMax = n
		return nil
	})
}

// RetryWait sets the bounds of the backoff between flush attempts; the
// backoff never outlasts the flush context. Defaults DefaultRetryWaitMin and
// DefaultRetryWaitMax.
func RetryWait(min, max time.Duration) NotifierOption {
	return notifierOption(func(o *notifierOptions) error {
		if min <= 0 || max < min {
			return fmt.Errorf("flush: invalid retry wait %s to %s (need 0 < min <= max)", min, max)
		}
		o.retryWaitMin, o.retryWaitMax = min, max
		return nil
	})
}

// AttemptTimeout bounds each flush attempt, so that a slow gateway leaves
// time for a retry. Default DefaultAttemptTimeout. Ignored with HTTPClient.
func AttemptTimeout(d time.Duration) NotifierOption {
	return notifierOption(func(o *notifierOptions) error {
		if d <= 0 {
			return fmt.Errorf("flush: invalid attempt timeout %s (must be positive)", d)
		}
		o.attemptTimeout = d
		return nil
	})
}

// HTTPClient sets the client flush calls use, for TLS settings for example.
// Its Timeout bounds each attempt. By default the Notifier uses its own
// client and closes its idle connections after each Flush.
func HTTPClient(c *http.Client) NotifierOption {
	return notifierOption(func(o *notifierOptions) error {
		if c == nil {
			return fmt.Errorf("flush: nil http client")
		}
		o.client = c
		return nil
	})
}

// TimestampWindow sets how far a flush request's timestamp may be from the
// handler's clock, either way. Default DefaultTimestampWindow.
func TimestampWindow(d time.Duration) HandlerOption {
	return handlerOption(func(o *handlerOptions) error {
		if d < time.Second {
			return fmt.Errorf("flush: invalid timestamp window %s (minimum 1s)", d)
		}
		o.window = d
		return nil
	})
}

// MaxBodyBytes sets the largest flush request body accepted. Default
// DefaultMaxBodyBytes.
func MaxBodyBytes(n int64) HandlerOption {
	return handlerOption(func(o *handlerOptions) error {
		if n < 64 {
			return fmt.Errorf("flush: invalid max body bytes %d (minimum 64)", n)
		}
		o.maxBody = n
		return nil
	})
}

// NonceCacheSize sets how many recent nonces the handler remembers to refuse
// replays; when it is full the oldest is forgotten, so volume never makes
// the handler refuse a valid flush. Default DefaultNonceCacheSize.
func NonceCacheSize(n int) HandlerOption {
	return handlerOption(func(o *handlerOptions) error {
		if n < 1 {
			return fmt.Errorf("flush: invalid nonce cache size %d (minimum 1)", n)
		}
		o.nonceSize = n
		return nil
	})
}

// Registration sets how a Notifier learns the registration it ends: czxid
// returns the creation zxid of the instance's ZooKeeper node
// (sd.Registrar.Czxid), asked once per Flush. Every signed request carries
// it, and a gateway evicts only that registration, so a replayed request
// can never end a later one. Required with StaticTargets or Targets.
func Registration(czxid func() int64) NotifierOption {
	return notifierOption(func(o *notifierOptions) error {
		if czxid == nil {
			return fmt.Errorf("flush: nil registration func")
		}
		o.registration = czxid
		return nil
	})
}

func newNotifierOptions(opts []NotifierOption) (*notifierOptions, error) {
	o := &notifierOptions{
		retryMax:       DefaultRetryMax,
		retryWaitMin:   DefaultRetryWaitMin,
		retryWaitMax:   DefaultRetryWaitMax,
		attemptTimeout: DefaultAttemptTimeout,
	}
	for _, opt := range opts {
		if err := opt.applyNotifier(o); err != nil {
			return nil, err
		}
	}
	return o, nil
}

func newHandlerOptions(opts []HandlerOption) (*handlerOptions, error) {
	o := &handlerOptions{
		window:    DefaultTimestampWindow,
		maxBody:   DefaultMaxBodyBytes,
		nonceSize: DefaultNonceCacheSize,
	}
	for _, opt := range opts {
		if err := opt.applyHandler(o); err != nil {
			return nil, err
		}
	}
	return o, nil
}
