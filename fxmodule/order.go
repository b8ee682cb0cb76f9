package fxmodule

import (
	"context"
	"errors"
	"sync"

	"go.uber.org/fx"
)

// fx runs OnStart hooks in the order they were appended, and a module's
// invokes run before the root's: an app's own fx.Invoke that appends the
// hook building its endpoints would run after Discovery's, which had
// registered the instance already. fx has no "after every start hook"
// event, so Discovery decorates fx.Lifecycle in the scope it is used in and
// sees every hook appended there: its own hook runs after the last one
// (right after its OnStart) and stops before it, whatever the order of the
// options. Hooks appended in a parent scope of Discovery are not seen.

// hookOrder is shared by every fx.Lifecycle the decorator hands out in one
// app: fx provides it once.
type hookOrder struct {
	mu   sync.Mutex
	n    int       // hooks appended so far
	last *lastHook // Discovery's, once appended
}

func newHookOrder() *hookOrder { return &hookOrder{} }

func decorateLifecycle(lc fx.Lifecycle, o *hookOrder) fx.Lifecycle {
	return &orderedLifecycle{Lifecycle: lc, order: o}
}

// orderedLifecycle is fx.Lifecycle with Discovery's hook kept last.
type orderedLifecycle struct {
	fx.Lifecycle
	order *hookOrder
}

// lastHook is the hook that runs after every other: it starts once, after
// the last hook appended started, and stops once, before that one stops.
type lastHook struct {
	hook fx.Hook

	mu               sync.Mutex
	started, stopped bool
}

func (l *lastHook) start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started || l.hook.OnStart == nil {
		l.started = true
		return nil
	}
	if err := l.hook.OnStart(ctx); err != nil {
		return err
	}
	l.started = true
	return nil
}

func (l *lastHook) stop(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.started || l.stopped || l.hook.OnStop == nil {
		l.stopped = true
		return nil
	}
	l.stopped = true
	return l.hook.OnStop(ctx)
}

// isFinal tells whether the hook appended at index i is the last one. It
// is asked at start, once every hook was appended.
func (o *hookOrder) isFinal(i int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return i == o.n-1
}

func (o *hookOrder) next() (int, *lastHook) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n++
	return o.n - 1, o.last
}

// Append appends h; once Discovery's hook was appended, h is wrapped so
// that, if it is the last, Discovery's starts after it and stops before it.
func (l *orderedLifecycle) Append(h fx.Hook) {
	i, last := l.order.next()
	if last == nil {
		l.Lifecycle.Append(h)
		return
	}
	l.Lifecycle.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			if h.OnStart != nil {
				if err := h.OnStart(ctx); err != nil {
					return err
				}
			}
			if !l.order.isFinal(i) {
				return nil
			}
			if err := last.start(ctx); err != nil {
				// fx does not stop a hook whose start failed: undo h here.
				if h.OnStop != nil {
					err = errors.Join(err, h.OnStop(context.WithoutCancel(ctx)))
				}
				return err
			}
			return nil
		},
		OnStop: func(ctx context.Context) error {
			var err error
			if l.order.isFinal(i) {
				err = last.stop(ctx)
			}
			if h.OnStop != nil {
				err = errors.Join(err, h.OnStop(ctx))
			}
			return err
		},
	})
}

// appendLast appends Discovery's hook, to run after every hook appended
// after it through lc. lc that is not decorated (Discovery used without
// its decorator) appends it as it is.
func appendLast(lc fx.Lifecycle, h fx.Hook) {
	ol, ok := lc.(*orderedLifecycle)
	if !ok {
		lc.Append(h)
		return
	}
	o := ol.order
	o.mu.Lock()
	i := o.n
	o.n++
	last := &lastHook{hook: h}
	o.last = last
	o.mu.Unlock()
	ol.Lifecycle.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			if o.isFinal(i) {
				return last.start(ctx)
			}
			return nil // the last hook appended starts it
		},
		OnStop: last.stop, // a no-op when the last hook stopped it
	})
}
