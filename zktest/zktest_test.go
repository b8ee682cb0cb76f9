package zktest_test

import (
	"errors"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/zktest"
)

func TestMain(m *testing.M) {
	if os.Getenv(noSharedMainEnv) != "" {
		goleak.VerifyTestMain(m) // the child of TestSharedNeedsSharedMain
	}
	goleak.VerifyTestMain(zktest.SharedMain(m))
}

func connect(t *testing.T, c *zktest.Cluster, rec *zktest.SessionRecorder) (*zk.Conn, <-chan zk.Event) {
	t.Helper()
	dial := zk.Dialer(net.DialTimeout)
	if rec != nil {
		dial = rec.Dial
	}
	conn, ev, err := zk.Connect(c.Addrs(), 2*time.Second, zk.WithLogInfo(false), zk.WithLogger(testutil.Silent{}), zk.WithDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	waitState(t, ev, zk.StateHasSession)
	return conn, ev
}

func waitState(t *testing.T, ev <-chan zk.Event, want zk.State) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case e := <-ev:
			if e.State == want {
				return
			}
		case <-deadline:
			t.Fatalf("no %v event within 20s", want)
		}
	}
}

func TestStandaloneServesAndRestarts(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := zktest.New(t)
	t.Logf("standalone server up in %v", time.Since(start))

	conn, _ := connect(t, c, nil)
	if _, err := conn.Create("/a", []byte("x"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if mode, err := c.Servers[0].Mode(); err != nil || mode != "standalone" {
		t.Fatalf("Mode() = %q, %v; want standalone", mode, err)
	}
	if err := c.Servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Servers[0].Mode(); err == nil {
		t.Fatal("a stopped server still answers")
	}
	if err := c.Restart(c.Servers[0]); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "data written before the restart read back", func() bool { d, _, err := conn.Get("/a"); return err == nil && string(d) == "x" })
}

func TestEphemeralsIsTheServersRecord(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	a, _ := connect(t, c, nil)
	b, _ := connect(t, c, nil)
	for _, n := range []struct {
		conn *zk.Conn
		path string
	}{{a, "/e1"}, {a, "/e2"}, {b, "/e3"}} {
		if _, err := n.conn.Create(n.path, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.Servers[0].Ephemerals()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got[a.SessionID()])
	if len(got) != 2 || !slices.Equal(got[a.SessionID()], []string{"/e1", "/e2"}) || !slices.Equal(got[b.SessionID()], []string{"/e3"}) {
		t.Fatalf("Ephemerals() = %v; want /e1 /e2 for %#x, /e3 for %#x", got, a.SessionID(), b.SessionID())
	}
	b.Close()
	testutil.WaitFor(t, "a closed session's node gone from the record", func() bool {
		got, err := c.Servers[0].Ephemerals()
		return err == nil && len(got) == 1 && got[b.SessionID()] == nil
	})
	if err := c.Servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Servers[0].Ephemerals(); err == nil {
		t.Fatal("a stopped server gave a record")
	}
}

func TestExpireSessionEndsItForTheClient(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	rec := zktest.NewSessionRecorder()
	conn, ev := connect(t, c, rec)
	old := conn.SessionID()
	if rec.LastSession() != old {
		t.Fatalf("recorded session 0x%x, client has 0x%x", rec.LastSession(), old)
	}
	if err := rec.Expire(c.Servers[0].Addr(), old); err != nil {
		t.Fatal(err)
	}
	waitState(t, ev, zk.StateExpired)
	waitState(t, ev, zk.StateHasSession)
	if conn.SessionID() == old {
		t.Fatal("the client kept its expired session")
	}
}

func TestEnsembleSurvivesLeaderKill(t *testing.T) {
	t.Parallel()
	c := zktest.New(t, zktest.Size(3))
	conn, _ := connect(t, c, nil)
	if _, err := conn.Create("/k", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	leader, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "a new leader after the old one was killed", func() bool { l, err := c.Leader(); return err == nil && l != leader })
	testutil.WaitFor(t, "the node read after the leader kill", func() bool { ok, _, err := conn.Exists("/k"); return err == nil && ok })
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
}

func TestBadOptionsAreRejected(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give zktest.Option
	}{
		{"a size of zero is refused", zktest.Size(0)},
		{"a tick time of one nanosecond is refused", zktest.TickTime(time.Nanosecond)},
		{"a negative start timeout is refused", zktest.StartTimeout(-time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := zktest.Start(t.TempDir(), tt.give); err == nil {
				t.Fatal("Start accepted a bad option")
			}
		})
	}
}

func TestPartitionCutsAndHeals(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	part := zktest.NewPartition()
	conn, ev, err := zk.Connect(c.Addrs(), 2*time.Second, zk.WithLogInfo(false), zk.WithLogger(testutil.Silent{}), zk.WithDialer(part.Dial))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitState(t, ev, zk.StateHasSession)
	part.Cut()
	waitState(t, ev, zk.StateDisconnected)
	if _, err := part.Dial("tcp", c.Servers[0].Addr(), time.Second); !errors.Is(err, zktest.ErrPartitioned) {
		t.Fatalf("Dial while cut = %v", err)
	}
	part.Heal()
	waitState(t, ev, zk.StateHasSession)
}

// CPUTime is the JVM's: a start alone costs it well over a tick; a stopped
// server has none.
func TestCPUTimeIsTheJVMs(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	s := c.Servers[0]
	d, err := s.CPUTime()
	if err != nil || d < 50*time.Millisecond {
		t.Fatalf("CPUTime %v, %v: want the JVM's start, over 50ms", d, err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if d, err := s.CPUTime(); err == nil {
		t.Errorf("a stopped server's CPUTime is %v, want an error", d)
	}
}
