package zktest_test

import (
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/zktest"
)

// A copy serves the original's data as it was when copied: a node written
// before is there, one written after is not, and the original goes on.
func TestACopyServesTheDataAsOfTheCopy(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	conn, _ := connect(t, c, nil)
	acl := zk.WorldACL(zk.PermAll)
	if _, err := conn.Create("/before", []byte("1"), 0, acl); err != nil {
		t.Fatal(err)
	}
	cp := c.CopyOf(t, c.Servers[0])
	if cp.Servers[0].Running() {
		t.Fatal("the copy runs before StartAll")
	}
	if _, err := conn.Create("/after", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	if err := cp.StartAll(); err != nil {
		t.Fatal(err)
	}
	if cp.Servers[0].Addr() == c.Servers[0].Addr() {
		t.Fatalf("the copy listens where the original does, %s", cp.Servers[0].Addr())
	}
	old, _ := connect(t, cp, nil)
	if data, _, err := old.Get("/before"); err != nil || string(data) != "1" {
		t.Fatalf("/before on the copy: %q, %v; want %q", data, err, "1")
	}
	if ok, _, err := old.Exists("/after"); err != nil || ok {
		t.Fatalf("/after on the copy: exists %v, %v; want it missing", ok, err)
	}
	if ok, _, err := conn.Exists("/after"); err != nil || !ok {
		t.Fatalf("/after on the original: exists %v, %v", ok, err)
	}
}
