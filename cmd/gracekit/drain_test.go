package main

import (
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
)

// Issue 22: gracekit drain marks the node, its Registrar keeps it
// OUT_OF_SERVICE (it reverted a plain status write), ls and watch say who
// took it out, the node is the same node; undrain lets the Registrar put
// it back UP.
func TestDrainAndUndrainAnInstance(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	base := basePath("drain")
	cl := newClient(t, c)
	r := register(t, cl, base, sd.Instance{Name: "quote", ID: "q1", Address: "127.0.0.1", Port: 8081})
	conn := rawConn(t, c, false)
	path := base + "/quote/q1"
	_, before, err := conn.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, on(c, base, "quote", "-o", "json")...)
	w.wait(t, "watching", is(evWatching, ""))

	if code, out, stderr := gk(t, on(c, base, "drain", "quote", "q1", "-force")...); code != exitOK || !strings.Contains(out, "drained "+path) {
		t.Fatalf("drain: exit %d, %q %q", code, out, stderr)
	}
	testutil.WaitFor(t, "the Registrar saw the drain", func() bool { return r.DrainedBy() == sd.DrainedByOperator })
	in := lsJSON(t, on(c, base, "ls", "quote")...).Services[0].Instances[0]
	if in.Status != string(sd.StatusOutOfService) || in.DrainedBy != sd.DrainedByOperator || in.Czxid != before.Czxid {
		t.Fatalf("ls after drain: %+v, want the same node OUT_OF_SERVICE by operator", in)
	}
	if _, out, _ := gk(t, on(c, base, "ls", "quote")...); !strings.Contains(out, "OUT_OF_SERVICE (by operator)") {
		t.Fatalf("ls text does not say who drained it:\n%s", out)
	}
	ev := w.wait(t, "the drain seen", is(evStatus, "q1"))
	if ev.Status != string(sd.StatusOutOfService) || ev.DrainedBy != sd.DrainedByOperator {
		t.Fatalf("watch: %+v", ev)
	}
	// The owner asks for UP: it stays out.
	if err := r.SetStatus(t.Context(), sd.StatusUp); err != nil {
		t.Fatal(err)
	}
	if in := lsJSON(t, on(c, base, "ls", "quote")...).Services[0].Instances[0]; in.Status != string(sd.StatusOutOfService) {
		t.Fatalf("SetStatus(UP) undid the drain: %+v", in)
	}

	if code, out, stderr := gk(t, on(c, base, "undrain", "quote", "q1")...); code != exitOK || !strings.Contains(out, "undrained") {
		t.Fatalf("undrain: exit %d, %q %q", code, out, stderr)
	}
	testutil.WaitFor(t, "UP again, unmarked", func() bool {
		in := lsJSON(t, on(c, base, "ls", "quote")...).Services[0].Instances[0]
		return in.Status == string(sd.StatusUp) && in.DrainedBy == "" && in.Czxid == before.Czxid
	})
}

// Issue 22: a drain of an unknown id is an error, and only those the
// node's ACL lets write may drain; a refused drain changes nothing.
func TestDrainRefusesAnUnknownIDAndTheUnauthorized(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	base := basePath("drain-acl")
	cl := newClient(t, c, sd.DigestAuth("admin", "secret"))
	r := register(t, cl, base, sd.Instance{Name: "quote", ID: "q1", Address: "127.0.0.1", Port: 8081})
	if code, _, stderr := gk(t, on(c, base, "drain", "quote", "nobody", "-auth", "admin:secret")...); code != exitUsage || !strings.Contains(stderr, `no instance "nobody"`) {
		t.Fatalf("drain of an unknown id: exit %d, %q", code, stderr)
	}
	if code, _, stderr := gk(t, on(c, base, "drain", "quote", "q1", "-force")...); code != exitUsage || !strings.Contains(stderr, "may not write") {
		t.Fatalf("drain without the credentials: exit %d, %q", code, stderr)
	}
	if in := lsJSON(t, on(c, base, "ls", "quote")...).Services[0].Instances[0]; in.Status != string(sd.StatusUp) || in.DrainedBy != "" {
		t.Fatalf("a refused drain changed the node: %+v", in)
	}
	if code, _, stderr := gk(t, on(c, base, "drain", "quote", "q1", "-force", "-auth", "admin:secret")...); code != exitOK {
		t.Fatalf("drain with the credentials: exit %d, %q", code, stderr)
	}
	testutil.WaitFor(t, "drained", func() bool { return r.DrainedBy() == sd.DrainedByOperator })
}

// Issue 40: a plain host:port node has no data, so no status to mark: a
// drain of one is refused (exit 3), as docs/DRAIN.md says, whether the
// layout was given (-layout plain) or found (a data-less node read as
// auto), and the node is left as it is.
func TestADrainOfAPlainNodeIsRefused(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	base := basePath("drain-plain")
	conn := rawConn(t, c, true)
	mkdirs(t, conn, base+"/quote", safeACL)
	node := base + "/quote/127.0.0.1:8080"
	if _, err := conn.Create(node, nil, zk.FlagEphemeral, safeACL); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		give []string
	}{
		{"drain with -layout plain", []string{"drain", "quote", "127.0.0.1:8080", "-layout", "plain"}},
		{"drain of a data-less node read as auto", []string{"drain", "quote", "127.0.0.1:8080", "-force"}},
		{"undrain with -layout plain", []string{"undrain", "quote", "127.0.0.1:8080", "-layout", "plain"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := gk(t, on(c, base, append(tt.give, "-auth", "admin:secret")...)...)
			if code != exitRefused || !strings.Contains(stderr, "refused") || !strings.Contains(stderr, "no status") {
				t.Fatalf("exit %d, %q; want %d, refused: no status", code, stderr, exitRefused)
			}
		})
	}
	if data, st, err := conn.Get(node); err != nil || len(data) != 0 || st.Version != 0 {
		t.Fatalf("the plain node after refused drains: %q, %+v, %v; want it unchanged", data, st, err)
	}
}
