package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// warmup is the cold phase of a provider that just started (-warmup): for
// the first span after its first call, each call costs an extra delay that
// decays linearly from peak to nothing, done one call at a time, as a cold
// cache sends its misses to one loader and a JIT compiles on one thread. A
// cold instance given a full share at once therefore queues its calls
// behind each other; one given a small share that grows (slow start) does
// not. The zero warmup (span 0) costs nothing.
type warmup struct {
	span time.Duration
	peak time.Duration

	warm  atomic.Bool // the span has passed: calls skip the loader
	mu    sync.Mutex  // the one loader
	first time.Time   // the first call; zero before it
}

func newWarmup(span, peak time.Duration) (*warmup, error) {
	if span < 0 || peak < 0 {
		return nil, fmt.Errorf("invalid -warmup %v / -warmup-delay %v (durations, zero or more)", span, peak)
	}
	return &warmup{span: span, peak: peak}, nil
}

// cost does the call's warm-up work, if the instance is still cold: it
// waits for the loader, then holds it for the decayed delay.
func (w *warmup) cost(ctx context.Context) error {
	if w == nil || w.span == 0 || w.peak == 0 || w.warm.Load() {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if w.first.IsZero() {
		w.first = now
	}
	age := now.Sub(w.first)
	if age >= w.span {
		w.warm.Store(true)
		return nil
	}
	d := time.Duration(float64(w.peak) * (1 - float64(age)/float64(w.span)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
