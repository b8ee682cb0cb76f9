package lifecycle

import (
	"fmt"
	"time"
)

// DefaultStopBudget is the default total of all stop timeouts: fx's default
// stop timeout.
const DefaultStopBudget = 15 * time.Second

// Option configures an Engine.
type Option interface {
	apply(*options) error
}

type options struct {
	budget    time.Duration
	listeners []Listener
}

type optionFunc func(*options) error

func (f optionFunc) apply(o *options) error { return f(o) }

// StopBudget sets the total that the steps' stop timeouts must fit in, such
// as the fx stop timeout or a Kubernetes termination grace period. It must be
// positive.
func StopBudget(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("lifecycle: invalid stop budget %s (must be positive)", d)
		}
		o.budget = d
		return nil
	})
}

// WithListener adds a Listener that receives every Event. It may be given
// more than once; listeners are called in the order given.
func WithListener(l Listener) Option {
	return optionFunc(func(o *options) error {
		if l == nil {
			return fmt.Errorf("lifecycle: nil listener")
		}
		o.listeners = append(o.listeners, l)
		return nil
	})
}
