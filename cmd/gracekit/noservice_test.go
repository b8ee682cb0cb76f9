package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/sd"
)

// Issue 32: a named service that does not exist exits 1, says so and names
// the services that do, on every command that takes one; it read as a
// clean, empty service ("no findings in 1 services, 0 nodes", exit 0).
func TestANamedServiceThatDoesNotExistExitsOne(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	base := basePath("no-service")
	cl := newClient(t, c)
	register(t, cl, base, sd.Instance{Name: "quote", ID: "q1", Address: "127.0.0.1", Port: 8081})
	conn := rawConn(t, c, false)
	mkdirs(t, conn, base+"/quote-grpc", zk.WorldACL(zk.PermAll)) // a service node without instances exists
	want := `gracekit: no service "qoute" under ` + base + ` (services there: quote, quote-grpc)`
	for _, cmd := range [][]string{
		{"ls", "qoute"}, {"ls", "qoute", "-o", "json"}, {"ls", "qoute", "-status", "UP"},
		{"check", "qoute"}, {"check", "qoute", "-o", "json"},
		{"drain", "qoute", "q1"}, {"drain", "qoute", "q1", "-force"}, {"undrain", "qoute", "q1"},
		{"watch", "qoute", "-for", "5s"}, {"watch", "qoute", "-o", "json", "-for", "5s"},
	} {
		code, out, stderr := gk(t, on(c, base, cmd...)...)
		got := strings.TrimSpace(stderr)
		if cmd[0] == "watch" {
			got = strings.TrimSuffix(got, ": give -wait to watch it until it appears")
		}
		if code != exitNoService || got != want || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and %q", cmd, code, out, stderr, want)
		}
	}
	// An existing service without instances is no error; a missing
	// instance of an existing service keeps its own message.
	if code, out, stderr := gk(t, on(c, base, "ls", "quote-grpc")...); code != exitOK || !strings.Contains(out, "(no instances)") {
		t.Errorf("ls of a service without instances: exit %d, %q %q", code, out, stderr)
	}
	if code, out, stderr := gk(t, on(c, base, "check", "quote-grpc", "-ignore", "open-acl")...); code != exitOK {
		t.Errorf("check of a service without instances: exit %d, %q %q", code, out, stderr)
	}
	if code, _, stderr := gk(t, on(c, base, "drain", "quote", "q9")...); code != exitUsage || !strings.Contains(stderr, `no instance "q9" in service "quote"`) {
		t.Errorf("drain of a missing instance: exit %d, %q", code, stderr)
	}
	if code, _, stderr := gk(t, on(c, base, "ls", "quote", "qoute")...); code != exitUsage || !strings.Contains(stderr, "wrong number of arguments") {
		t.Errorf("two services: exit %d, %q", code, stderr)
	}
}

// With no service at all under the base path, the message says so; with a
// base path the session may not list, it says that, and still exits 1.
func TestANamedServiceUnderAnEmptyOrUnlistableBasePath(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	conn := rawConn(t, c, true)
	empty := basePath("no-service-empty")
	mkdirs(t, conn, empty, safeACL)
	for _, cmd := range [][]string{{"ls", "quote"}, {"check", "quote"}, {"drain", "quote", "q1"}} {
		code, _, stderr := gk(t, on(c, empty, cmd...)...)
		if want := `gracekit: no service "quote" under ` + empty + ` (no services there)`; code != exitNoService || strings.TrimSpace(stderr) != want {
			t.Errorf("%v: exit %d, %q; want exit 1 and %q", cmd, code, stderr, want)
		}
	}
	hidden := basePath("no-service-hidden")
	mkdirs(t, conn, hidden, zk.DigestACL(zk.PermAll, "admin", "secret"))
	code, _, stderr := gk(t, on(c, hidden, "ls", "quote")...)
	if code != exitNoService || !strings.Contains(stderr, `no service "quote" under `+hidden+` (the services there cannot be listed: `) {
		t.Errorf("under a base path nobody may list: exit %d, %q", code, stderr)
	}
}

// The list of services there is cut at noServiceListed: a registry of
// thousands would bury the message.
func TestNoServiceErrorListsAFewServices(t *testing.T) {
	t.Parallel()
	var there []string
	for i := range noServiceListed + 5 {
		there = append(there, fmt.Sprintf("s%02d", i))
	}
	e := &noServiceError{service: "x", base: "/services", chroot: "/prod", there: there}
	got := e.Error()
	if !strings.Contains(got, `no service "x" under /services (chroot /prod) (services there: s00, s01,`) ||
		!strings.Contains(got, "s19 and 5 more; gracekit ls lists them)") || strings.Contains(got, "s20") {
		t.Fatalf("%q", got)
	}
}

// watch -wait waits for what does not exist yet, as watch of a service did
// before issue 32: without a service, for the base path too.
func TestWatchWaitWaitsForAMissingBasePath(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	base := basePath("watch-wait-base")
	if code, _, stderr := gk(t, on(c, base, "watch")...); code != exitUsage || !strings.Contains(stderr, "base path "+base+" does not exist") {
		t.Fatalf("watch under a missing base path without -wait: exit %d, %q", code, stderr)
	}
	if code, _, stderr := gk(t, on(c, base, "watch", "quote")...); code != exitUsage || !strings.Contains(stderr, "base path "+base+" does not exist") {
		t.Fatalf("watch quote under a missing base path without -wait: exit %d, %q", code, stderr)
	}
	if code, out, stderr := gk(t, on(c, base, "watch", "-wait", "-for", "300ms")...); code != exitOK || out != "" {
		t.Fatalf("watch -wait -for 300ms under a missing base path: exit %d, %q %q", code, out, stderr)
	}
	w := startWatch(t, on(c, base, "-wait", "-o", "json")...)
	cl := newClient(t, c)
	register(t, cl, base, sd.Instance{Name: "quote", ID: "q1", Address: "127.0.0.1", Port: 8081})
	w.wait(t, "quote, under a base path that appeared", func(ev watchEvent) bool {
		return (ev.Event == evPresent || ev.Event == evAdded) && ev.Service == "quote" && ev.ID == "q1"
	})
	if code := w.stop(t); code != exitOK || len(w.errs.all()) != 0 {
		t.Fatalf("exit %d: %s", code, w.errs.all())
	}
}
