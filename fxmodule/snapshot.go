package fxmodule

import (
	"strings"
	"sync"
	"time"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/shutdown"
)

// Environment variables of the consumer's snapshot (docs/STATIC-STABILITY.md).
const (
	EnvSnapshotDir       = "GRACEKIT_SNAPSHOT_DIR"
	EnvSnapshotStartWait = "GRACEKIT_SNAPSHOT_START_WAIT"
	EnvSnapshotMaxAge    = "GRACEKIT_SNAPSHOT_MAX_AGE"
	EnvSnapshotReadiness = "GRACEKIT_SNAPSHOT_READINESS"
)

// snapshotFromLookup reads the snapshot's variables into c.
func snapshotFromLookup(c *Config, get func(string) string) error {
	c.SnapshotDir = get(EnvSnapshotDir)
	switch v := strings.ToLower(get(EnvSnapshotReadiness)); v {
	case "", "ready":
	case "require-live":
		c.SnapshotRequireLive = true
	default:
		return &ConfigError{Field: "SnapshotRequireLive", Env: EnvSnapshotReadiness, Value: v, Want: "ready or require-live"}
	}
	for _, d := range []struct {
		field, env string
		p          *time.Duration
	}{
		{"SnapshotStartWait", EnvSnapshotStartWait, &c.SnapshotStartWait},
		{"SnapshotMaxAge", EnvSnapshotMaxAge, &c.SnapshotMaxAge},
	} {
		v := get(d.env)
		if v == "" {
			continue
		}
		x, err := time.ParseDuration(v)
		if err != nil || x <= 0 {
			return &ConfigError{Field: d.field, Env: d.env, Value: v, Want: "a positive Go duration such as 3s or 24h (unset for the default)", Err: err}
		}
		*d.p = x
	}
	return nil
}

// snapshot is the consumer's snapshot options, none without SnapshotDir;
// a wait or age without a directory, or out of range, is a *ConfigError.
func (c Config) snapshot(m *Metrics) ([]consumer.Option, error) {
	if c.SnapshotDir == "" {
		if c.SnapshotRequireLive {
			return nil, &ConfigError{Field: "SnapshotRequireLive", Env: EnvSnapshotReadiness, Value: "require-live",
				Want: "ready (the default) without Config.SnapshotDir (" + EnvSnapshotDir + "), which turns the snapshot on"}
		}
		for _, d := range []struct {
			field, env string
			v          time.Duration
		}{
			{"SnapshotStartWait", EnvSnapshotStartWait, c.SnapshotStartWait},
			{"SnapshotMaxAge", EnvSnapshotMaxAge, c.SnapshotMaxAge},
		} {
			if d.v != 0 {
				return nil, &ConfigError{Field: d.field, Env: d.env, Value: d.v.String(),
					Want: "zero without Config.SnapshotDir (" + EnvSnapshotDir + "), which turns the snapshot on"}
			}
		}
		return nil, nil
	}
	opts := []consumer.Option{consumer.WithSnapshot(c.SnapshotDir)}
	for _, d := range []struct {
		field, env string
		v          time.Duration
		opt        func(time.Duration) consumer.Option
	}{
		{"SnapshotStartWait", EnvSnapshotStartWait, c.SnapshotStartWait, consumer.WithSnapshotStartWait},
		{"SnapshotMaxAge", EnvSnapshotMaxAge, c.SnapshotMaxAge, consumer.WithSnapshotMaxAge},
	} {
		switch {
		case d.v < 0:
			return nil, &ConfigError{Field: d.field, Env: d.env, Value: d.v.String(), Want: "a positive duration, or zero for the default"}
		case d.v > 0:
			opts = append(opts, d.opt(d.v))
		}
	}
	if m != nil && (m.SnapshotAge != nil || m.SnapshotWriteFailures != nil) {
		opts = append(opts, consumer.WithSnapshotMetrics(consumer.SnapshotMetrics{Age: m.SnapshotAge, WriteFailures: m.SnapshotWriteFailures}))
	}
	return opts, nil
}

// liveFollower keeps a Readiness not ready while a consumer serves a
// service from its snapshot (Config.SnapshotRequireLive).
type liveFollower struct {
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// followLive sets r's liveness from c now, then once a
// consumer.SnapshotInterval, until stopped.
func followLive(c *consumer.Consumer, r *shutdown.Readiness) *liveFollower {
	f := &liveFollower{stop: make(chan struct{}), done: make(chan struct{})}
	r.SetLive(c.Live() == nil)
	go func() {
		defer close(f.done)
		t := time.NewTicker(consumer.SnapshotInterval)
		defer t.Stop()
		for {
			select {
			case <-f.stop:
				return
			case <-t.C:
				r.SetLive(c.Live() == nil)
			}
		}
	}()
	return f
}

// halt stops f and waits for it; nil does nothing.
func (f *liveFollower) halt() {
	if f == nil {
		return
	}
	f.once.Do(func() { close(f.stop) })
	<-f.done
}
