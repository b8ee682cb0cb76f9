// Package assemblytest holds test helpers that build the assembly's roles
// over real ZooKeeper sessions. It is apart from internal/testutil, which
// sd's own internal tests import and so cannot import sd.
package assemblytest

import (
	"context"
	"testing"
	"time"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
)

// StartConsumer is a started consumer over sess, stopped when the test ends.
func StartConsumer(tb testing.TB, sess *sd.Session) *consumer.Consumer {
	tb.Helper()
	c, err := consumer.New(sess)
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// StartProvider is a started provider over sess, stopped (within 10 s)
// when the test ends.
func StartProvider(tb testing.TB, sess *sd.Session, cfg provider.Config) *provider.Provider {
	tb.Helper()
	p, err := provider.New(sess, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Stop(ctx)
	})
	return p
}
