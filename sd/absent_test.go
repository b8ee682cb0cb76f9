package sd_test

import (
	"path"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
)

// writesSince counts the writes ZooKeeper took for the node p since
// before: creates and deletes under its parent, and setData on the node
// (while it is the same node).
func writesSince(t *testing.T, conn testutil.ZK, p string, parent0 *zk.Stat, node0 *zk.Stat) int {
	t.Helper()
	_, parent, err := conn.Exists(path.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	n := int(parent.Cversion - parent0.Cversion)
	if ok, node, err := conn.Exists(p); err != nil {
		t.Fatal(err)
	} else if ok && node0 != nil && node.Czxid == node0.Czxid {
		n += int(node.Version - node0.Version)
	} else if ok {
		n += int(node.Version)
	}
	return n
}

// Issue 31: with a codec whose nodes store no status, OUT_OF_SERVICE is
// the node's absence: SetStatus deletes it and UP creates it again, one
// write each, and nothing is written after (the codecs read their node
// back as UP, and the old Registrar wrote it again and again: 510 and
// 685 setData in 2 s). The window below is one in which that loop wrote
// hundreds of times; the count asserted is a bound, not a time.
func TestPlainAndGoKitRegistrarsWriteAtMostTwicePerStatusChange(t *testing.T) {
	t.Parallel()
	zkc, base := sharedZK(t)
	cl := newClient(t, zkc)
	conn := testutil.ZKConn(t, zkc.Addrs())
	for _, codec := range []sd.Codec{sd.PlainCodec{}, sd.GoKitCodec{}} {
		inst := instance("absent", 7100)
		if _, ok := codec.(sd.GoKitCodec); ok {
			inst.Port = 7101
		}
		r := register(t, cl, inst, sd.WithCodec(codec), sd.ParentMode(sd.ParentsPersistent), sd.BasePath(base))
		p := r.Path()
		for _, st := range []sd.Status{sd.StatusOutOfService, sd.StatusOutOfService, sd.StatusUp, sd.StatusUp, sd.StatusOutOfService, sd.StatusUp} {
			_, parent0, err := conn.Exists(path.Dir(p))
			if err != nil {
				t.Fatal(err)
			}
			var node0 *zk.Stat
			if ok, ns, _ := conn.Exists(p); ok {
				node0 = ns
			}
			if err := r.SetStatus(ctxFor(t), st); err != nil {
				t.Fatal(err)
			}
			// A window for a write loop to show: the keeper retries within
			// 100 ms, so a loop writes several times in it.
			time.Sleep(300 * time.Millisecond)
			if n := writesSince(t, conn, p, parent0, node0); n > 2 {
				t.Fatalf("%T: SetStatus(%s) took %d writes, want at most 2", codec, st, n)
			}
			ok, _, err := conn.Exists(p)
			if err != nil {
				t.Fatal(err)
			}
			if want := st == sd.StatusUp; ok != want {
				t.Fatalf("%T, after SetStatus(%s): node there %v, want %v", codec, st, ok, want)
			}
		}
	}
}
