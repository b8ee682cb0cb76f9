package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/lifecycle"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newConsumer(t *testing.T, zkc *zktest.Cluster) (*consumer.Consumer, *sd.Session) {
	t.Helper()
	sess, err := sd.NewSession(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(sess)
	if err != nil {
		t.Fatal(err)
	}
	return c, sess
}

// Issue 13, case 4: a second Start takes no second share, so one Stop
// closes the session.
func TestConsumerStartTwiceTakesOneShare(t *testing.T) {
	zkc := zktest.New(t)
	c, sess := newConsumer(t, zkc)
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); !errors.Is(err, lifecycle.ErrStarted) {
		t.Fatalf("second Start: %v, want lifecycle.ErrStarted", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Client(); !errors.Is(err, sd.ErrClosed) {
		t.Fatalf("the session after the one Stop: %v, want sd.ErrClosed (a second share leaked)", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("a second Stop: %v, want the first's nil", err)
	}
}

// Issue 13, case 4: Stop before Start, then Start, is refused and takes
// no share.
func TestConsumerStopBeforeStartThenStartIsRefused(t *testing.T) {
	zkc := zktest.New(t)
	c, sess := newConsumer(t, zkc)
	ctx := context.Background()
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if err := c.Start(ctx); !errors.Is(err, lifecycle.ErrStopped) {
		t.Fatalf("Start after Stop: %v, want lifecycle.ErrStopped", err)
	}
	if st := sess.State(); st != lifecycle.StateNew {
		t.Fatalf("the session: %s, want new (no share taken)", st)
	}
	if _, err := c.Instancer(ctx, "quote"); !errors.Is(err, sd.ErrClosed) {
		t.Fatalf("Instancer after Stop: %v, want sd.ErrClosed", err)
	}
}

// A consumer whose Start failed (ZooKeeper down) holds nothing and may be
// retried once ZooKeeper is back.
func TestConsumerStartRetriesAfterAFailure(t *testing.T) {
	zkc := zktest.New(t)
	sess, err := sd.NewSession(zkc.ConnectString(), sd.ConnectTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(sess)
	if err != nil {
		t.Fatal(err)
	}
	if err := zkc.StopAll(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err == nil {
		t.Fatal("Start succeeded with ZooKeeper down")
	}
	if st := c.State(); st != lifecycle.StateFailed {
		t.Fatalf("state: %s, want failed", st)
	}
	if err := zkc.StartAll(); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := sess.State(); st != lifecycle.StateStopped {
		t.Fatalf("the session after Stop: %s, want stopped", st)
	}
}

// A Session's Stop that no Start matches changes nothing.
func TestSessionStopWithoutAShareChangesNothing(t *testing.T) {
	zkc := zktest.New(t)
	sess, err := sd.NewSession(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := sess.Stop(ctx); !errors.Is(err, sd.ErrNotStarted) {
		t.Fatalf("Stop before Start: %v, want sd.ErrNotStarted", err)
	}
	if _, err := sess.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sess.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sess.Stop(ctx); err != nil {
		t.Fatalf("a Stop after the last: %v, want nil", err)
	}
}
