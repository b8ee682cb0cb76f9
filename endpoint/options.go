package endpoint

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/go-kit/kit/metrics"
)

// Defaults of the [Endpointer] options.
const (
	// DefaultEjectAfter is the number of consecutive connect failures that
	// eject an instance.
	DefaultEjectAfter = 5
	// DefaultCoolOff is the first ejection's length; it doubles with each
	// repeated ejection up to DefaultMaxCoolOff.
	DefaultCoolOff = 5 * time.Second
	// DefaultMaxCoolOff caps the ejection length.
	DefaultMaxCoolOff = 2 * time.Minute
	// DefaultMaxEjectedShare is the largest share of the instances that may
	// be unavailable (ejected or closing) for an ejection to happen.
	DefaultMaxEjectedShare = 0.5
	// DefaultClosingHold is how long an instance that sent the closing signal
	// stays unpicked if discovery keeps listing it.
	DefaultClosingHold = time.Minute
	// DefaultEvictionHold is how long an evicted instance stays out at most
	// if discovery keeps listing it.
	DefaultEvictionHold = 30 * time.Second
)

// Option configures [NewEndpointer].
type Option interface {
	apply(*options) error
}

type optionFunc func(*options) error

func (f optionFunc) apply(o *options) error { return f(o) }

type options struct {
	invalidate        bool
	invalidateTimeout time.Duration
	logger            *slog.Logger
	classify          Classifier
	ejectAfter        int
	coolOff           time.Duration
	maxCoolOff        time.Duration
	maxEjectedShare   float64
	closingHold       time.Duration
	evictionHold      time.Duration
	ejections         metrics.Counter
	ejectionReasons   metrics.Counter  // see metrics.go
	slowStart         *SlowStart       // nil: no ramps
	now               func() int64     // tests only
	wallNow           func() time.Time // tests only
}

func defaultOptions() options {
	return options{
		logger:          slog.New(slog.DiscardHandler),
		classify:        Classify,
		ejectAfter:      DefaultEjectAfter,
		coolOff:         DefaultCoolOff,
		maxCoolOff:      DefaultMaxCoolOff,
		maxEjectedShare: DefaultMaxEjectedShare,
		closingHold:     DefaultClosingHold,
		evictionHold:    DefaultEvictionHold,
	}
}

// InvalidateOnError mirrors go-kit's sd.InvalidateOnError: after the
// Instancer reports an error, the Endpointer keeps its endpoints for timeout,
// then removes them all and returns the error until the Instancer publishes a
// good set again. Without it the last endpoints are kept for as long as the
// errors last. The timeout must not be negative.
func InvalidateOnError(timeout time.Duration) Option {
	return optionFunc(func(o *options) error {
		if timeout < 0 {
			return fmt.Errorf("endpoint: invalidate timeout %v is negative (minimum is 0)", timeout)
		}
		o.invalidate, o.invalidateTimeout = true, timeout
		return nil
	})
}

// WithLogger sets the logger for factory errors, discovery errors, ejections
// and closing instances. The default discards everything.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) error {
		if l == nil {
			return fmt.Errorf("endpoint: logger is nil")
		}
		o.logger = l
		return nil
	})
}

// WithClassifier sets how the Endpointer tells connect failures (class
// [NotSent]) from other errors for outlier ejection. The default is
// [Classify].
func WithClassifier(c Classifier) Option {
	return optionFunc(func(o *options) error {
		if c == nil {
			return fmt.Errorf("endpoint: classifier is nil")
		}
		o.classify = c
		return nil
	})
}

// EjectAfter sets how many consecutive connect failures eject an instance
// (default [DefaultEjectAfter]). n must not be negative; 0 turns ejection off.
func EjectAfter(n int) Option {
	return optionFunc(func(o *options) error {
		if n < 0 {
			return fmt.Errorf("endpoint: eject after %d failures is negative (minimum is 0, which turns ejection off)", n)
		}
		o.ejectAfter = n
		return nil
	})
}

// EjectCoolOff sets the first ejection's length and the cap it doubles up to
// on repeated ejections (defaults [DefaultCoolOff], [DefaultMaxCoolOff]).
// Both must be positive and base must not exceed max.
func EjectCoolOff(base, max time.Duration) Option {
	return optionFunc(func(o *options) error {
		if base <= 0 {
			return fmt.Errorf("endpoint: cool-off %v is not positive (minimum is 1ns)", base)
		}
		if max < base {
			return fmt.Errorf("endpoint: max cool-off %v is below the cool-off %v", max, base)
		}
		o.coolOff, o.maxCoolOff = base, max
		return nil
	})
}

// MaxEjectedShare sets the largest share of instances that may be unavailable
// for an ejection to happen (default [DefaultMaxEjectedShare]). It must be in
// [0, 1]; the last available instance is never ejected.
func MaxEjectedShare(share float64) Option {
	return optionFunc(func(o *options) error {
		if !(share >= 0 && share <= 1) {
			return fmt.Errorf("endpoint: max ejected share %v out of range (0 to 1)", share)
		}
		o.maxEjectedShare = share
		return nil
	})
}

// ClosingHold sets how long an instance that sent the closing signal stays
// unpicked while discovery still lists it (default [DefaultClosingHold]).
// It must be positive.
func ClosingHold(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("endpoint: closing hold %v is not positive (minimum is 1ns)", d)
		}
		o.closingHold = d
		return nil
	})
}

// EvictionHold sets how long an instance removed by [Endpointer.Evict]
// stays out at most while discovery still lists it (default
// [DefaultEvictionHold]); it comes back earlier once discovery stops listing
// it and lists it again. It must be positive.
func EvictionHold(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("endpoint: eviction hold %v is not positive (minimum is 1ns)", d)
		}
		o.evictionHold = d
		return nil
	})
}

// WithEjectionCounter counts ejections.
func WithEjectionCounter(c metrics.Counter) Option {
	return optionFunc(func(o *options) error {
		if c == nil {
			return fmt.Errorf("endpoint: ejection counter is nil")
		}
		o.ejections = c
		return nil
	})
}

// withClock replaces the monotonic clock (nanoseconds, > 0); tests only.
func withClock(now func() int64) Option {
	return optionFunc(func(o *options) error {
		o.now = now
		return nil
	})
}
