package main

import (
	"encoding/json"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
)

// frozenServer accepts TCP connections and never answers, as a frozen
// ZooKeeper or a firewall that drops replies.
func frozenServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// Issue 22: -timeout bounds every exit, within a second more, against a
// server that accepts and never answers (it took 8 s for 2 s).
func TestTimeoutBoundsTheExitAgainstAServerThatNeverAnswers(t *testing.T) {
	t.Parallel()
	addr := frozenServer(t)
	const timeout = 2 * time.Second
	for _, cmd := range [][]string{{"ls"}, {"watch", "quote"}, {"watch"}, {"check"}} {
		start := time.Now()
		code, _, stderr := gk(t, append(cmd, "-zk", addr, "-timeout", timeout.String())...)
		d := time.Since(start)
		if code != exitUsage || !strings.Contains(stderr, "no ZooKeeper server") {
			t.Fatalf("%v: exit %d, %q", cmd, code, stderr)
		}
		if d > timeout+time.Second {
			t.Fatalf("%v: exited after %v, want at most -timeout %v plus 1s", cmd, d, timeout)
		}
	}
}

// Issue 22: a base path or a chroot that does not exist exits 2 and says
// which, instead of reading as an empty, clean registry.
func TestAMissingBasePathOrChrootExitsTwo(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	missing := basePath("no-such-base")
	for _, cmd := range [][]string{{"ls"}, {"ls", "quote"}, {"check"}, {"watch"}} {
		code, _, stderr := gk(t, on(c, missing, cmd...)...)
		if code != exitUsage || !strings.Contains(stderr, "base path "+missing+" does not exist") {
			t.Errorf("%v under a missing base path: exit %d, %q", cmd, code, stderr)
		}
	}
	chroot := basePath("no-such-chroot")
	for _, cmd := range [][]string{{"ls"}, {"check"}, {"watch", "quote"}} {
		code, _, stderr := gk(t, append(cmd, "-zk", c.ConnectString()+chroot)...)
		if code != exitUsage || !strings.Contains(stderr, "chroot "+chroot+" of -zk") {
			t.Errorf("%v in a missing chroot: exit %d, %q", cmd, code, stderr)
		}
	}
}

// Issue 22: -layout plain reads data-less /<base>/<service>/<host:port>
// nodes as sd.PlainCodec does, where the Curator layout finds them
// malformed.
func TestLayoutPlainReadsDataLessNodes(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	base := basePath("plain")
	conn := rawConn(t, c, true)
	mkdirs(t, conn, base+"/quote", safeACL)
	for _, n := range []string{"127.0.0.1:8080", "127.0.0.1:8081"} {
		if _, err := conn.Create(base+"/quote/"+n, nil, zk.FlagEphemeral, safeACL); err != nil {
			t.Fatal(err)
		}
	}
	got := lsJSON(t, on(c, base, "ls", "-layout", "plain")...)
	ins := got.Services[0].Instances
	if len(ins) != 2 || ins[0].Address != "127.0.0.1" || ins[0].Port != 8080 || ins[1].Port != 8081 || ins[0].Status != "UP" {
		t.Fatalf("plain layout: %+v", ins)
	}
	if code, out, stderr := gk(t, on(c, base, "check", "-layout", "plain")...); code != exitOK {
		t.Fatalf("check -layout plain: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, _ := gk(t, on(c, base, "check")...); code != exitFindings || !strings.Contains(out, "malformed") {
		t.Fatalf("check in the Curator layout: exit %d, want 1 with malformed findings:\n%s", code, out)
	}
}

// Issue 22: watch without a service follows every service, those that
// appear later included.
func TestWatchWithoutAServiceWatchesEveryService(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	base := basePath("watch-all")
	cl := newClient(t, c)
	register(t, cl, base, sd.Instance{Name: "quote", ID: "q1", Address: "127.0.0.1", Port: 8081})
	w := startWatch(t, on(c, base, "-o", "json")...)
	w.wait(t, "quote present", is(evPresent, "q1"))
	w.wait(t, "quote watching", func(ev watchEvent) bool { return ev.Event == evWatching && ev.Service == "quote" })
	register(t, cl, base, sd.Instance{Name: "orders", ID: "o1", Address: "127.0.0.1", Port: 9001})
	w.wait(t, "orders, a new service, seen", func(ev watchEvent) bool {
		return (ev.Event == evPresent || ev.Event == evAdded) && ev.Service == "orders" && ev.ID == "o1"
	})
	register(t, cl, base, sd.Instance{Name: "quote", ID: "q2", Address: "127.0.0.1", Port: 8082})
	w.wait(t, "q2 added", is(evAdded, "q2"))
	if code := w.stop(t); code != exitOK {
		t.Fatalf("exit %d: %s", code, w.errs.all())
	}
}

// Issue 22: ls -status lists only the instances with that status.
func TestLsStatusFilters(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	base := basePath("ls-status")
	cl := newClient(t, c)
	register(t, cl, base, sd.Instance{Name: "quote", ID: "up", Address: "127.0.0.1", Port: 8081})
	out := register(t, cl, base, sd.Instance{Name: "quote", ID: "out", Address: "127.0.0.1", Port: 8082})
	if err := out.SetStatus(t.Context(), sd.StatusOutOfService); err != nil {
		t.Fatal(err)
	}
	for status, want := range map[string]string{"OUT_OF_SERVICE": "out", "UP": "up"} {
		ins := lsJSON(t, on(c, base, "ls", "-status", status)...).Services[0].Instances
		if len(ins) != 1 || ins[0].ID != want {
			t.Errorf("ls -status %s: %+v, want only %s", status, ins, want)
		}
	}
}

// Issue 22: text output shows the SSL port beside the port, and JSON
// times carry milliseconds, three digits, as the README shows.
func TestTextShowsTheSSLPortAndJSONHasMilliseconds(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	base := basePath("ssl-ms")
	cl := newClient(t, c)
	register(t, cl, base, sd.Instance{Name: "quote", ID: "tls", Address: "127.0.0.1", Port: 8080, SSLPort: 8443})
	code, out, stderr := gk(t, on(c, base, "ls")...)
	if code != exitOK || !strings.Contains(out, "SSLPORT") || !regexp.MustCompile(`tls\s+127\.0\.0\.1\s+8080\s+8443\s+UP`).MatchString(out) {
		t.Fatalf("ls text: exit %d %s\n%s", code, stderr, out)
	}
	w := startWatch(t, on(c, base, "quote", "-for", "1h")...)
	testutil.WaitFor(t, "the present line", func() bool {
		for _, l := range w.out.all() {
			if strings.Contains(l, "present") {
				if !strings.Contains(l, "127.0.0.1:8080 ssl:8443") {
					t.Fatalf("watch text %q lacks the SSL port", l)
				}
				return true
			}
		}
		return false
	})
	_, out, _ = gk(t, on(c, base, "ls", "-o", "json")...)
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	ms := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	inst := doc["services"].([]any)[0].(map[string]any)["instances"].([]any)[0].(map[string]any)
	for name, v := range map[string]any{"time": doc["time"], "registered": inst["registered"], "created": inst["created"]} {
		if s, _ := v.(string); !ms.MatchString(s) {
			t.Errorf("ls -o json %s %q: want milliseconds, three digits", name, v)
		}
	}
}
