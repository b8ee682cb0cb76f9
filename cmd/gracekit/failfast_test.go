package main

import (
	"net"
	"strings"
	"testing"
	"time"
)

// Issue 32: when every server refuses the connection nobody listens, and
// the command says so at once, naming the addresses it tried, rather than
// waiting out -timeout.
func TestEveryServerRefusingEndsAtOnceNamingThem(t *testing.T) {
	t.Parallel()
	var addrs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		ln.Close() // nothing listens there now: a connect is refused
	}
	start := time.Now()
	code, _, stderr := gk(t, "ls", "-zk", strings.Join(addrs, ","), "-timeout", "30s")
	took := time.Since(start)
	if code == 0 || !strings.Contains(stderr, "refused") {
		t.Fatalf("exit %d, stderr %q; want a failure saying the servers refused", code, stderr)
	}
	for _, a := range addrs {
		if !strings.Contains(stderr, a) {
			t.Errorf("stderr %q does not name %s", stderr, a)
		}
	}
	// Not a timing assertion on a noisy machine: 30s is the alternative.
	if took > 15*time.Second {
		t.Errorf("took %v with -timeout 30s: it waited for the timeout", took)
	}
}
