package sd_test

import (
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
)

// An Instancer keeps what it publishes, not each node's bytes: fields this
// package does not know survive a rewrite of its Instances only with
// KeepNodeData.
func TestInstancerKeepsNodeBytesOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	conn := testutil.ZKConn(t, c.Addrs())
	node := `{"name":"kept","id":"a","address":"10.0.0.1","port":80,"x-team":"payments"}`
	for _, p := range []string{base, base + "/kept"} {
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Create(base+"/kept/a", []byte(node), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, c)
	for _, tt := range []struct {
		opts []sd.InstancerOption
		want bool
	}{{nil, false}, {[]sd.InstancerOption{sd.KeepNodeData()}, true}} {
		in, ch := newInstancer(t, cl, "kept", append(tt.opts, sd.BasePath(base))...)
		waitSet(t, ch, "10.0.0.1:80")
		insts := in.Instances()
		if len(insts) != 1 {
			t.Fatalf("%d instances", len(insts))
		}
		out, err := sd.CuratorCodec{}.Encode(insts[0])
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(out), `"x-team":"payments"`); got != tt.want {
			t.Errorf("KeepNodeData %v: the unknown field kept %v, want %v: %s", tt.want, got, tt.want, out)
		}
	}
}
