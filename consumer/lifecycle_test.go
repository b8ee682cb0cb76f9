package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/lifecycle"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// TestMain lets tests that leave their server alone share one (sharedZK);
// goleak checks after it stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(zktest.SharedMain(m)) }

// sharedZK is the test binary's shared server and a base path no other
// test uses (pass sd.BasePath(base) to every Registrar and, through
// consumer.WithInstancerOptions, to the consumer, and write raw nodes under
// base): the test must leave the server alone and count nothing
// server-wide (see zktest's package doc).
func sharedZK(t *testing.T) (*zktest.Cluster, string) {
	t.Helper()
	return zktest.Shared(t), zktest.UniquePath(t)
}

func newConsumer(t *testing.T, zkc *zktest.Cluster, opts ...consumer.Option) (*consumer.Consumer, *sd.Session) {
	t.Helper()
	sess, err := sd.NewSession(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(sess, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c, sess
}

// Issue 13, case 4: a second Start takes no second share, so one Stop
// closes the session.
func TestConsumerStartTwiceTakesOneShare(t *testing.T) {
	t.Parallel()
	zkc, base := sharedZK(t)
	c, sess := newConsumer(t, zkc, consumer.WithInstancerOptions(sd.BasePath(base)))
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
	t.Parallel()
	zkc, base := sharedZK(t)
	c, sess := newConsumer(t, zkc, consumer.WithInstancerOptions(sd.BasePath(base)))
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

// A consumer started while ZooKeeper is down dials nothing at Start; its
// first load says what is wrong after the connect timeout, holds nothing,
// and succeeds once ZooKeeper is back.
func TestConsumerLoadRetriesAfterAFailure(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t) // of its own: the test stops it
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
	if err := c.Start(ctx); err != nil {
		t.Fatalf("Start did I/O: %v", err)
	}
	if _, err := c.Instancer(ctx, "quote"); !errors.Is(err, zk.ErrNoServer) {
		t.Fatalf("a first load with ZooKeeper down: %v, want zk.ErrNoServer", err)
	}
	if err := zkc.StartAll(); err != nil {
		t.Fatal(err)
	}
	// Retried as a user's code would: a loaded machine's restarted JVM
	// may give no session within the 500 ms connect timeout of one retry
	// (once, under make stress).
	var last error
	testutil.WaitFor(t, "a retried first load once ZooKeeper is back", func() bool {
		_, last = c.Instancer(ctx, "quote")
		return last == nil || !errors.Is(last, zk.ErrNoServer)
	})
	if last != nil {
		t.Fatalf("retry: %v", last)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := sess.State(); st != lifecycle.StateStopped {
		t.Fatalf("the session after Stop: %s, want stopped", st)
	}
}

// Stop ends every call still waiting in Instancer, even one whose ctx has
// no deadline, against a server that accepts and never answers.
func TestConsumerStopEndsCallsWaitingForAFirstLoad(t *testing.T) {
	addr := testutil.FrozenServer(t)
	sess, err := sd.NewSession(addr, sd.ConnectTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(sess)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for range 2 { // the maker of the Instancer, and one waiting on it
		go func() {
			_, err := c.Instancer(context.Background(), "quote")
			errs <- err
		}()
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, sd.ErrClosed) {
				t.Fatalf("a call waiting at Stop: %v, want sd.ErrClosed", err)
			}
		case <-stopCtx.Done():
			t.Fatal("a call waiting in Instancer outlived Stop")
		}
	}
}

// A gateway of 64 services, against ZooKeeper's stock limit of 60
// connections per host, loads them all over one session (it registers
// nothing: its own session never opens), and Stop closes it.
func TestAConsumerOf64ServicesLoadsThemAllOverOneSession(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t) // of its own, stock maxClientCnxns: the test counts the server's sessions
	reg, err := sd.NewClient(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const services = 64
	for i := range services {
		r, err := sd.NewRegistrar(reg, sd.Instance{Name: fmt.Sprint("svc", i), ID: fmt.Sprint("i", i), Address: "127.0.0.1", Port: 9000 + i})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.RegisterContext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	before, err := zkc.Servers[0].Sessions()
	if err != nil {
		t.Fatal(err)
	}
	c, _ := newConsumer(t, zkc)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range services {
		in, err := c.Instancer(ctx, fmt.Sprint("svc", i))
		if err != nil {
			t.Fatalf("service %d: %v", i, err)
		}
		if got := in.Instances(); len(got) != 1 {
			t.Fatalf("service %d loaded %+v", i, got)
		}
	}
	during, err := zkc.Servers[0].Sessions()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(during) - len(before); n != 1 {
		t.Fatalf("the consumer of %d services holds %d sessions, want 1", services, n)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// The server confirmed the close before Stop returned; its connection
	// list follows a moment later.
	testutil.WaitFor(t, "the server to list only the sessions of before", func() bool {
		after, err := zkc.Servers[0].Sessions()
		return err == nil && len(after) == len(before)
	})
}

// A Session's Stop that no Start matches changes nothing.
func TestSessionStopWithoutAShareChangesNothing(t *testing.T) {
	t.Parallel()
	zkc := zktest.Shared(t) // a session only, no node: no base path
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
