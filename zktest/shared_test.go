package zktest_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/zktest"
)

// The environment that makes the test binary a child of one of the tests
// below: sharedChildEnv runs TestSharedChild, noSharedMainEnv runs it
// without SharedMain in TestMain.
const (
	sharedChildEnv  = "ZKTEST_SHARED_CHILD"
	noSharedMainEnv = "ZKTEST_NO_SHARED_MAIN"
)

func TestSharedIsOneServerForTheBinary(t *testing.T) {
	t.Parallel()
	a, b := zktest.Shared(t), zktest.Shared(t)
	if a != b {
		t.Fatalf("two Shared calls gave two clusters (%s, %s)", a.ConnectString(), b.ConnectString())
	}
	var other *zktest.Cluster
	t.Run("a subtest gets the same", func(t *testing.T) { other = zktest.Shared(t) })
	if other != a {
		t.Fatalf("a subtest's Shared gave %s, the test's %s", other.ConnectString(), a.ConnectString())
	}
	if len(a.Servers) != 1 || !a.Servers[0].Running() {
		t.Fatalf("shared cluster: %d servers, want one running standalone", len(a.Servers))
	}
	if !answersRuok(a.Addrs()[0]) { // what TestSharedServerStopsWithTheRun checks is gone
		t.Fatalf("the shared server %s does not answer ruok", a.Addrs()[0])
	}
	conn, _ := connect(t, a, nil)
	base := zktest.UniquePath(t)
	if _, err := conn.Create(base, []byte("x"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create %s on the shared server: %v", base, err)
	}
	if got, _, err := conn.Get(base); err != nil || string(got) != "x" {
		t.Fatalf("get %s: %q, %v; want x", base, got, err)
	}
}

func TestUniquePathIsNewAndAValidNodeName(t *testing.T) {
	t.Parallel()
	conn, _ := connect(t, zktest.Shared(t), nil)
	seen := map[string]bool{}
	check := func(t *testing.T) {
		p := zktest.UniquePath(t)
		if seen[p] {
			t.Fatalf("UniquePath gave %s twice", p)
		}
		seen[p] = true
		if !strings.HasPrefix(p, "/") || strings.Count(p, "/") != 1 {
			t.Fatalf("UniquePath %q: want one absolute node name", p)
		}
		// The server takes it as a node: the name is valid and nobody had it.
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("create %s: %v", p, err)
		}
	}
	check(t)
	check(t)
	t.Run("sub/test with spaces, slashes & ünïcode", check)
	t.Run("sub/test with spaces, slashes & ünïcode", check) // the same name, once more
	for p := range seen {
		if !strings.HasPrefix(p, "/TestUniquePathIsNewAndAValidNodeName") {
			t.Errorf("UniquePath %s does not name its test", p)
		}
	}
}

// TestSharedChild is the child of the tests below: it starts the shared
// server, says where it is, and leaves it to TestMain.
func TestSharedChild(t *testing.T) {
	if os.Getenv(sharedChildEnv) == "" {
		return // a helper process, as os/exec's TestHelperProcess: it does its work only in the child
	}
	c := zktest.Shared(t)
	fmt.Printf("shared-server addr=%s dir=%s\n", c.Addrs()[0], c.Servers[0].Dir())
}

// child runs this test binary with TestSharedChild alone and env set.
func child(t *testing.T, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSharedChild$", "-test.count=1", "-test.v")
	cmd.Env = append(append(os.Environ(), sharedChildEnv+"=1"), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

var sharedLine = regexp.MustCompile(`shared-server addr=(\S+) dir=(\S+)`)

func TestSharedServerStopsWithTheRun(t *testing.T) {
	t.Parallel()
	if _, _, err := zktest.Runtime(); err != nil {
		t.Fatal(err)
	}
	out, err := child(t)
	if err != nil {
		t.Fatalf("child run: %v\n%s", err, out)
	}
	m := sharedLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the child did not report its shared server:\n%s", out)
	}
	addr, dir := m[1], m[2]
	// The child's SharedMain killed the JVM before the binary exited: no
	// one answers on its port any more, and its data is gone.
	if answersRuok(addr) {
		t.Errorf("the shared server %s still answers after its binary's run", addr)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the shared server's data %s is still there after the run (stat: %v)", dir, err)
	}
}

func TestSharedNeedsSharedMain(t *testing.T) {
	t.Parallel()
	if _, _, err := zktest.Runtime(); err != nil {
		t.Fatal(err)
	}
	out, err := child(t, noSharedMainEnv+"=1")
	if err == nil {
		t.Fatalf("Shared without SharedMain passed; want it to fail the test:\n%s", out)
	}
	if !strings.Contains(out, "zktest.SharedMain(m)") || sharedLine.MatchString(out) {
		t.Fatalf("Shared without SharedMain: want a failure naming zktest.SharedMain(m) and no server; got:\n%s", out)
	}
}

// answersRuok reports whether a ZooKeeper server answers ruok at addr.
func answersRuok(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ruok")); err != nil {
		return false
	}
	b, _ := io.ReadAll(c)
	return string(b) == "imok"
}
