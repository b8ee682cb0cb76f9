// Package testutil holds the helpers this repository's tests share.
package testutil

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// WaitLimit bounds every wait: generous, since CI machines are shared.
const WaitLimit = 30 * time.Second

// WaitFor polls cond until it holds, failing the test after WaitLimit.
func WaitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(WaitLimit)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %v", what, WaitLimit)
		}
		<-tick.C
	}
}

// ZKConn is a plain, silent ZooKeeper connection for looking at nodes,
// one per test and ensemble however often it is asked for (a poll that
// dialled each time would run into the server's maxClientCnxns), closed
// when the test ends.
func ZKConn(tb testing.TB, addrs []string) *zk.Conn {
	tb.Helper()
	key := zkConnKey{tb, strings.Join(addrs, ",")}
	zkConns.mu.Lock()
	defer zkConns.mu.Unlock()
	if conn, ok := zkConns.m[key]; ok {
		return conn
	}
	conn, _, err := zk.Connect(addrs, 5*time.Second, zk.WithLogInfo(false), zk.WithLogger(Silent{}))
	if err != nil {
		tb.Fatal(err)
	}
	zkConns.m[key] = conn
	tb.Cleanup(func() {
		zkConns.mu.Lock()
		delete(zkConns.m, key)
		zkConns.mu.Unlock()
		conn.Close()
	})
	return conn
}

type zkConnKey struct {
	tb    testing.TB
	addrs string
}

var zkConns = struct {
	mu sync.Mutex
	m  map[zkConnKey]*zk.Conn
}{m: map[zkConnKey]*zk.Conn{}}

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
