package sd_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
)

// The plain layout /<prefix>/service/<name>/<ip:port>, as its own tools
// write it: persistent parents, and IPv6 providers written ip + ":" + port.

// reaped waits until the server's container reaper went once over every
// container that is empty now: a probe container emptied after them is
// reaped, then a second one, which only a later pass can reap. ZooKeeper
// hides a node's type from clients: a container is known by its reaping.
func reaped(t *testing.T, conn testutil.ZK, under string) {
	t.Helper()
	probe := under + "/probe"
	for range 2 {
		if _, err := conn.CreateContainer(probe, nil, zk.FlagContainer, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Create(probe+"/x", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		if err := conn.Delete(probe+"/x", -1); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "the probe container reaped", func() bool {
			ok, _, err := conn.Exists(probe)
			return err == nil && !ok
		})
	}
}

// Each level is emptied in a tree of its own (a, b, c), so one reaper pass
// tells them all: the service node, its parent, and the root.
func TestPlainLayoutParentsStayAfterTheLastInstanceLeaves(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	cl := newClient(t, c)
	conn := testutil.ZKConn(t, c.Addrs())
	for _, root := range []string{"/a", "/b", "/c"} {
		r := register(t, cl, sd.Instance{Name: "quote", Address: "10.0.0.7", Port: 4083},
			sd.WithCodec(sd.PlainCodec{}), sd.BasePath(base+root+"/service"))
		if r.Path() != base+root+"/service/quote/10.0.0.7:4083" {
			t.Fatalf("path %q", r.Path())
		}
		if err := r.DeregisterContext(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/b/service/quote", "/c/service/quote", "/c/service"} {
		if err := conn.Delete(base+p, -1); err != nil {
			t.Fatal(err)
		}
	}
	reaped(t, conn, base)
	for _, p := range []string{"/a/service/quote", "/b/service", "/c"} {
		if ok, _, err := conn.Exists(base + p); err != nil || !ok {
			t.Fatalf("%s: exists %v, %v; want a persistent node that stays once empty", p, ok, err)
		}
	}
}

func TestPlainLayoutParentModeContainerIsReaped(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	cl := newClient(t, c)
	conn := testutil.ZKConn(t, c.Addrs())
	r := register(t, cl, sd.Instance{Name: "quote", Address: "10.0.0.7", Port: 4083},
		sd.WithCodec(sd.PlainCodec{}), sd.BasePath(base+"/app/service"), sd.ParentMode(sd.ParentsContainer))
	if err := r.DeregisterContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the empty container parents reaped", func() bool {
		ok, _, err := conn.Exists(base + "/app")
		return err == nil && !ok
	})
}

func TestCuratorLayoutParentModePersistentStays(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	cl := newClient(t, c)
	conn := testutil.ZKConn(t, c.Addrs())
	r := register(t, cl, instance("kept", 3001), sd.ParentMode(sd.ParentsPersistent), sd.BasePath(base))
	if err := r.DeregisterContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	reaped(t, conn, base)
	if ok, _, err := conn.Exists(base + "/kept"); err != nil || !ok {
		t.Fatalf("exists %v, %v; want a persistent service node", ok, err)
	}
}

func TestParentModeRefusesAnUnknownMode(t *testing.T) {
	var ce *sd.ConfigError
	_, err := sd.NewRegistrar(nil, instance("svc", 1), sd.ParentMode(0))
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "parent mode") {
		t.Fatalf("err = %v; want a *ConfigError about the parent mode", err)
	}
}

func TestPlainLayoutReadsBareAndBracketedIPv6(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	conn := testutil.ZKConn(t, c.Addrs())
	for _, p := range []string{"", // base itself
		"/app", "/app/service", "/app/service/quote",
		"/app/service/quote/0:0:0:0:0:0:0:1:4083", // ip + ":" + port
		"/app/service/quote/[::1]:4084",
		"/app/service/quote/10.0.0.7:4085",
		"/app/service/quote/1.2.3.4:5:6", // not IPv6: still malformed
	} {
		if _, err := conn.Create(base+p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	in, ch := newInstancer(t, newClient(t, c), "quote", sd.WithCodec(sd.PlainCodec{}), sd.BasePath(base+"/app/service"))
	waitSet(t, ch, "[0:0:0:0:0:0:0:1]:4083", "[::1]:4084", "10.0.0.7:4085")
	if got := in.Stats().Malformed; got < 1 {
		t.Fatalf("malformed = %d, want the 1.2.3.4:5:6 node counted", got)
	}
}
