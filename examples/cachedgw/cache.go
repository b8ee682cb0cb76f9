package main

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// target is one cached instance.
type target struct {
	id   string
	addr string // host:port
}

// lister reads the instance list; it may block.
type lister interface {
	List(ctx context.Context) ([]target, error)
}

// cache holds the instance list read last. It is safe for concurrent use.
type cache struct {
	src lister
	ttl time.Duration
	m   *metrics
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	targets []target
	readAt  time.Time            // zero: never read
	evicted map[string]time.Time // id -> when a flush removed it
	loading chan struct{}        // non-nil while a read is in progress
	loadErr error                // the last read's error

	next atomic.Uint64 // round robin
}

func newCache(src lister, ttl time.Duration, m *metrics, log *slog.Logger) *cache {
	return &cache{src: src, ttl: ttl, m: m, log: log, now: time.Now, evicted: map[string]time.Time{}}
}

// list returns the cached list, reading it first when it is empty or older
// than the TTL. One read runs at a time; callers that arrive meanwhile wait
// for it.
func (c *cache) list(ctx context.Context) ([]target, error) {
	{
		c.mu.Lock()
		fresh := !c.readAt.IsZero() && c.now().Sub(c.readAt) < c.ttl
		if fresh && len(c.targets) > 0 {
			ts := c.targets
			c.mu.Unlock()
			return ts, nil
		}
		if c.loading != nil {
			wait := c.loading
			c.mu.Unlock()
			select {
			case <-wait:
				c.mu.Lock()
				ts, err := c.targets, c.loadErr
				c.mu.Unlock()
				if err != nil || len(ts) > 0 {
					return ts, err
				}
				return nil, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		reason := "ttl"
		switch {
		case c.readAt.IsZero():
			reason = "first"
		case fresh:
			reason = "empty"
		}
		done := make(chan struct{})
		c.loading = done
		c.mu.Unlock()
		// The read serves every waiter: the caller's cancel does not end it.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		c.load(lctx, reason)
		cancel()
		close(done)
		c.mu.Lock()
		ts, err := c.targets, c.loadErr
		c.mu.Unlock()
		return ts, err
	}
}

// load reads the list and replaces the cache with it, without the ids a
// flush removed while it read.
func (c *cache) load(ctx context.Context, reason string) {
	begin := c.now()
	ts, err := c.src.List(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loading = nil
	c.loadErr = err
	if err != nil {
		c.log.Warn("read instance list", "reason", reason, "err", err)
		return
	}
	kept := ts[:0:0]
	for _, t := range ts {
		if at, ok := c.evicted[t.id]; ok && !at.Before(begin) {
			continue // flushed while we read: the read may predate it
		}
		kept = append(kept, t)
	}
	c.targets, c.readAt = kept, c.now()
	c.m.reads.WithLabelValues(reason).Inc()
	c.m.instances.Set(float64(len(kept)))
	c.log.Info("instance list read", "reason", reason, "instances", len(kept))
}

// evict removes id from the cached list; it reports whether it was listed.
func (c *cache) evict(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evicted[id] = c.now()
	for i, t := range c.targets {
		if t.id == id {
			// A new slice: callers may hold the old one.
			c.targets = append(c.targets[:i:i], c.targets[i+1:]...)
			c.m.instances.Set(float64(len(c.targets)))
			return true
		}
	}
	return false
}

// pick returns the index of the next target of ts, round robin.
func (c *cache) pick(ts []target) int {
	return int(c.next.Add(1)-1) % len(ts)
}

func (c *cache) ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.readAt.IsZero()
}
