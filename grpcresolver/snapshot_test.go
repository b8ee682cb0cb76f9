package grpcresolver_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/resolver"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/grpcresolver"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
)

// snapshotConsumer is a started consumer keeping a snapshot in dir,
// stopped when the test ends.
func snapshotConsumer(t *testing.T, zkc *zkEnv, dir string, opts ...consumer.Option) *consumer.Consumer {
	t.Helper()
	sess, err := sd.NewSession(zkc.ConnectString(), sd.SessionTimeout(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(sess, append([]consumer.Option{consumer.WithSnapshot(dir)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// Issue 42: a ClientConn whose consumer starts while every ZooKeeper
// server is down resolves from the consumer's snapshot, as its endpoints
// do, and its calls reach the instances that still serve; the resolver
// reports no error while it serves the snapshot, ResolveNow included.
func TestClientConnsResolveFromTheSnapshotWhenZooKeeperIsDownAtStart(t *testing.T) {
	t.Parallel()
	zkc := ownZK(t)
	startBackend(t, zkc, "a", nil)
	startBackend(t, zkc, "b", nil)
	dir := t.TempDir()
	first := snapshotConsumer(t, zkc, dir)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLimit)
	defer cancel()
	if _, err := first.Instancer(ctx, service); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the snapshot", func() bool {
		files, _ := filepath.Glob(filepath.Join(dir, "*.snapshot.json"))
		return len(files) == 1
	})
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := zkc.StopAll(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = zkc.StartAll() }) // before the backends deregister, after the rest stopped

	c := snapshotConsumer(t, zkc, dir, consumer.WithSnapshotStartWait(500*time.Millisecond))
	b := newBuilder(t, c, grpcresolver.LoadTimeout(2*time.Second))
	cc := dial(t, b, "gracekit:///"+service)
	waitServedBy(t, cc, "a", "b")

	rec, r := build(t, b, "gracekit:///"+service)
	rec.waitIDs(t, "a", "b")
	r.ResolveNow(resolver.ResolveNowOptions{})
	time.Sleep(200 * time.Millisecond) // the hint is handled
	if _, errs := rec.snapshot(); len(errs) > 0 {
		t.Fatalf("the resolver reported %v while serving the snapshot", errs)
	}
}

// A Builder whose load attempts end before the consumer's snapshot start
// wait would never resolve from the snapshot: it is refused.
func TestALoadTimeoutWithinTheSnapshotStartWaitIsRefused(t *testing.T) {
	t.Parallel()
	sess, err := sd.NewSession("127.0.0.1:2181")
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(sess, consumer.WithSnapshot(t.TempDir()), consumer.WithSnapshotStartWait(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := grpcresolver.NewBuilder(c, grpcresolver.LoadTimeout(3*time.Second)); err == nil {
		t.Fatal("a load timeout equal to the start wait was accepted")
	}
	if _, err := grpcresolver.NewBuilder(c); err != nil {
		t.Fatalf("the default load timeout: %v", err)
	}
}
