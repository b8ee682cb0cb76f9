package zktest_test

import (
	"net"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/zktest"
)

// connectTo opens a session with the one member s.
func connectTo(t *testing.T, s *zktest.Server) *zk.Conn {
	t.Helper()
	conn, ev, err := zk.Connect([]string{s.Addr()}, 4*time.Second, zk.WithLogInfo(false), zk.WithLogger(testutil.Silent{}),
		zk.WithDialer(net.DialTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	waitState(t, ev, zk.StateHasSession)
	return conn
}

// An isolated follower answers its clients from behind the ensemble, then
// stops serving once syncLimit passes without its leader, and catches up
// when it rejoins.
func TestIsolatedFollowerServesFromBehindAndRejoins(t *testing.T) {
	c := zktest.New(t, zktest.Size(3), zktest.Isolatable())
	leader, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	var follower *zktest.Server
	for _, s := range c.Servers {
		if s != leader {
			follower = s
			break
		}
	}
	w, r := connectTo(t, leader), connectTo(t, follower)
	if _, err := w.Create("/before", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Sync("/before"); err != nil {
		t.Fatal(err)
	}
	if err := c.Isolate(follower); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create("/after", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("the ensemble lost its quorum with one follower isolated: %v", err)
	}
	ok, _, err := r.Exists("/after")
	if err != nil {
		t.Fatalf("the isolated follower does not answer reads: %v", err)
	}
	if ok {
		t.Fatal("the isolated follower has /after: it was not cut off from its leader")
	}
	testutil.WaitFor(t, "the isolated follower to stop serving", func() bool {
		_, err := follower.Mode()
		return err != nil
	})
	c.Rejoin(follower)
	if err := c.WaitServing(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the follower to have /after after it rejoined", func() bool {
		ok, _, err := r.Exists("/after")
		return err == nil && ok
	})
}

func TestIsolateNeedsIsolatable(t *testing.T) {
	var c zktest.Cluster
	if err := c.Isolate(&zktest.Server{ID: 1}); err == nil {
		t.Fatal("Isolate on a cluster without Isolatable() = nil, want an error")
	}
}
