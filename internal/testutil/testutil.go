// Package testutil holds the helpers this repository's tests share.
package testutil

import (
	"net"
	"testing"
	"time"
)

// WaitLimit bounds every wait: generous, since CI machines are shared.
const WaitLimit = 30 * time.Second

// FirstSecureConnect bounds a test Client's wait for its first session on
// a new TLS or SASL server: the JVM runs the TLS and SASL code uncompiled,
// and under make test's load a first handshake took over sd's default
// connect timeout (10 s), with one server and with a fresh ensemble.
const FirstSecureConnect = 30 * time.Second

// WaitFor polls cond until it holds, failing the test after WaitLimit.
func WaitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	WaitForWithin(tb, what, WaitLimit, cond)
}

// WaitForWithin is WaitFor with a bound of the test's own, for a wait the
// code under test may stretch by design (a multiple of a session timeout).
func WaitForWithin(tb testing.TB, what string, limit time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %v", what, limit)
		}
		<-tick.C
	}
}

// Silent is a go-zookeeper logger that prints nothing.
type Silent struct{}

// Printf discards its arguments.
func (Silent) Printf(string, ...any) {}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// FrozenServer is a listener that accepts connections and never answers,
// as a frozen ZooKeeper or a firewall that drops replies would; it is
// closed when the test ends.
func FrozenServer(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, conn)
		}
	}()
	tb.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}
