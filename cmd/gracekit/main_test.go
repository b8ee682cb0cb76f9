package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// The package's tests share one ZooKeeper server, each under a base path
// of its own: a JVM start per test would cost more than the tests. It is
// stopped after the tests and before goleak looks.
var shared struct {
	once sync.Once
	dir  string
	c    *zktest.Cluster
	err  error
}

type stopSharedZK struct{ m *testing.M }

func (s stopSharedZK) Run() int {
	code := s.m.Run()
	closing.Wait() // go-zookeeper's Close, given up to a second (registry.close)
	if shared.c != nil {
		_ = shared.c.Close()
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	return code
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(stopSharedZK{m}) }

// zkServer returns the shared server, starting it on first use. Like
// zktest.New, it fails when ZooKeeper is not installed.
func zkServer(t *testing.T) *zktest.Cluster {
	t.Helper()
	if _, _, err := zktest.Runtime(); err != nil {
		t.Fatal(err)
	}
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "gracekit-cli-zk-"); shared.err != nil {
			return
		}
		// Extended types, for the TTL node check must flag.
		shared.c, shared.err = zktest.Start(shared.dir,
			zktest.JVMArgs(append(append([]string{}, zktest.DefaultJVMArgs...), "-Dzookeeper.extendedTypesEnabled=true")...))
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.c
}

// gk runs the command line and returns its exit status and output.
func gk(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLimit)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

// on is the flags that point a command at base on c.
func on(c *zktest.Cluster, base string, args ...string) []string {
	return append(args, "-zk", c.ConnectString(), "-base-path", base)
}

// rawConn is a plain ZooKeeper connection with a session, to write nodes
// the library would not; with auth it authenticates as admin.
func rawConn(t *testing.T, c *zktest.Cluster, auth bool) testutil.ZK {
	t.Helper()
	conn := testutil.ZKConn(t, c.Addrs())
	if auth {
		if err := conn.AddAuth("digest", []byte("admin:secret")); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "a raw session", func() bool { return conn.State() == zk.StateHasSession })
	return conn
}

// safeACL is what check wants on a parent: anyone reads, admin writes.
var safeACL = append(zk.WorldACL(zk.PermRead), zk.DigestACL(zk.PermAll, "admin", "secret")...)

// mkdirs creates p and its missing parents, persistent, with acl.
func mkdirs(t *testing.T, conn testutil.ZK, p string, acl []zk.ACL) {
	t.Helper()
	cur := ""
	for _, part := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		cur += "/" + part
		if _, err := conn.Create(cur, nil, 0, acl); err != nil && err != zk.ErrNodeExists {
			t.Fatalf("create %s: %v", cur, err)
		}
	}
}

// curatorJSON is a node's data as gracekit (and Curator) write it.
func curatorJSON(t *testing.T, service, id, addr string, port int) []byte {
	t.Helper()
	b, err := sd.CuratorCodec{}.Encode(sd.Instance{Name: service, ID: id, Address: addr, Port: port,
		Metadata: map[string]string{sd.MetadataStatus: string(sd.StatusUp)}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newClient is a library client of c, closed when the test ends.
func newClient(t *testing.T, c *zktest.Cluster, opts ...sd.ClientOption) *sd.Client {
	t.Helper()
	cl, err := sd.NewClient(c.ConnectString(), append([]sd.ClientOption{sd.SessionTimeout(4 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// register registers inst under base with gracekit's Registrar.
func register(t *testing.T, cl *sd.Client, base string, inst sd.Instance) *sd.Registrar {
	t.Helper()
	r, err := sd.NewRegistrar(cl, inst, sd.BasePath(base))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLimit)
	defer cancel()
	if err := r.RegisterContext(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.DeregisterContext(context.Background()) })
	return r
}

// basePath is a base path no other test, nor an earlier run of the same
// one (-count), used on the shared server.
func basePath(name string) string { return fmt.Sprintf("/%s-%d", name, baseSeq.Add(1)) }

var baseSeq atomic.Int64

func hex(session int64) string { return fmt.Sprintf("0x%x", uint64(session)) }
