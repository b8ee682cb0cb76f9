package testutil

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// ZKSessionTimeout is the session timeout of ZKConn's connections.
const ZKSessionTimeout = 5 * time.Second

// ZKRetryBound is how long a ZK call waits out a server that is away (a
// restart, an election) before it returns the error: six session timeouts,
// time enough for a JVM to start on a loaded machine and for go-zookeeper to
// come back to it, as a user's retrying code would.
const ZKRetryBound = 6 * ZKSessionTimeout

// ZK is a test's own connection for writing and looking at nodes. Its calls
// wait out a server that is away, as a user's code would: go-zookeeper
// fails a request queued while it cannot reach a server (ErrNoServer) or
// whose connection dropped (ErrConnectionClosed), and a test that has just
// restarted its server must not fail for that. Such calls are retried, with
// a short backoff, for up to ZKRetryBound. A create or delete retried after
// a reply that may have been lost, which then finds the node there (or gone),
// has done what it was asked and returns no error.
type ZK struct {
	*zk.Conn
}

// transient tells whether err means the request did not reach the server
// (sent is false) or may have reached it but the reply was lost.
func transient(err error) (retry, sent bool) {
	switch {
	case errors.Is(err, zk.ErrNoServer):
		return true, false
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrSessionExpired),
		errors.Is(err, zk.ErrSessionMoved):
		return true, true
	}
	return false, false
}

// retry runs call until it returns an error that is not transient, or
// ZKRetryBound passes and it was tried three times. maybeDone is set once an attempt may have reached the
// server.
func retry(call func(maybeDone bool) error) error {
	start := time.Now()
	wait := 20 * time.Millisecond
	maybeDone := false
	for tries := 1; ; tries++ {
		err := call(maybeDone)
		again, sent := transient(err)
		if !again {
			return err
		}
		// At least three tries: one try can take longer than the bound by
		// itself (go-zookeeper waits up to ten receive timeouts, 33 s here,
		// for a handshake a starved server does not answer).
		if time.Since(start) > ZKRetryBound && tries >= 3 {
			return fmt.Errorf("testutil: %w (%d tries over %v)", err, tries, time.Since(start).Round(time.Millisecond))
		}
		maybeDone = maybeDone || sent
		time.Sleep(wait)
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// Create is zk.Conn.Create, waiting out a server that is away.
func (c ZK) Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	var out string
	err := retry(func(maybeDone bool) error {
		var err error
		out, err = c.Conn.Create(path, data, flags, acl)
		if maybeDone && errors.Is(err, zk.ErrNodeExists) && flags&zk.FlagSequence == 0 {
			out, err = path, nil
		}
		return err
	})
	return out, err
}

// CreateContainer is zk.Conn.CreateContainer, waiting out a server that is away.
func (c ZK) CreateContainer(path string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	var out string
	err := retry(func(maybeDone bool) error {
		var err error
		out, err = c.Conn.CreateContainer(path, data, flags, acl)
		if maybeDone && errors.Is(err, zk.ErrNodeExists) {
			out, err = path, nil
		}
		return err
	})
	return out, err
}

// Delete is zk.Conn.Delete, waiting out a server that is away.
func (c ZK) Delete(path string, version int32) error {
	return retry(func(maybeDone bool) error {
		err := c.Conn.Delete(path, version)
		if maybeDone && errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		return err
	})
}

// Set is zk.Conn.Set, waiting out a server that is away.
func (c ZK) Set(path string, data []byte, version int32) (*zk.Stat, error) {
	var st *zk.Stat
	err := retry(func(bool) error {
		var err error
		st, err = c.Conn.Set(path, data, version)
		return err
	})
	return st, err
}

// Get is zk.Conn.Get, waiting out a server that is away.
func (c ZK) Get(path string) ([]byte, *zk.Stat, error) {
	var data []byte
	var st *zk.Stat
	err := retry(func(bool) error {
		var err error
		data, st, err = c.Conn.Get(path)
		return err
	})
	return data, st, err
}

// Children is zk.Conn.Children, waiting out a server that is away.
func (c ZK) Children(path string) ([]string, *zk.Stat, error) {
	var kids []string
	var st *zk.Stat
	err := retry(func(bool) error {
		var err error
		kids, st, err = c.Conn.Children(path)
		return err
	})
	return kids, st, err
}

// Exists is zk.Conn.Exists, waiting out a server that is away.
func (c ZK) Exists(path string) (bool, *zk.Stat, error) {
	var ok bool
	var st *zk.Stat
	err := retry(func(bool) error {
		var err error
		ok, st, err = c.Conn.Exists(path)
		return err
	})
	return ok, st, err
}

// SetACL is zk.Conn.SetACL, waiting out a server that is away.
func (c ZK) SetACL(path string, acl []zk.ACL, version int32) (*zk.Stat, error) {
	var st *zk.Stat
	err := retry(func(bool) error {
		var err error
		st, err = c.Conn.SetACL(path, acl, version)
		return err
	})
	return st, err
}

// Multi is zk.Conn.Multi, retried only while the request cannot have
// reached the server: a transaction's outcome after a lost reply is the
// test's to judge.
func (c ZK) Multi(ops ...any) ([]zk.MultiResponse, error) {
	var out []zk.MultiResponse
	err := retry(func(maybeDone bool) error {
		var err error
		out, err = c.Conn.Multi(ops...)
		if _, sent := transient(err); sent {
			return &sentError{err}
		}
		return err
	})
	var s *sentError
	if errors.As(err, &s) {
		err = s.err
	}
	return out, err
}

type sentError struct{ err error }

func (e *sentError) Error() string { return e.err.Error() }

// ZKConn is a test's ZK connection for writing and looking at nodes, one
// per test and ensemble however often it is asked for (a poll that dialled
// each time would run into the server's maxClientCnxns), closed when the
// test ends.
func ZKConn(tb testing.TB, addrs []string) ZK {
	tb.Helper()
	key := zkConnKey{tb, strings.Join(addrs, ",")}
	zkConns.mu.Lock()
	defer zkConns.mu.Unlock()
	if conn, ok := zkConns.m[key]; ok {
		return ZK{conn}
	}
	dial := func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &handshakeConn{Conn: c, bound: max(ZKSessionTimeout/time.Duration(len(addrs)), time.Second)}, nil
	}
	conn, _, err := zk.Connect(addrs, ZKSessionTimeout, zk.WithLogInfo(false), zk.WithLogger(Silent{}), zk.WithDialer(dial))
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
	return ZK{conn}
}

// handshakeConn bounds the wait for the server's answer to the handshake
// as ZooKeeper's Java client bounds its connect (the session timeout shared
// among the servers), where go-zookeeper waits ten receive timeouts (33 s
// here): a server starved of CPU once left a test's handshake unanswered
// that long, and the test failed waiting for a read the next try would
// have answered at once.
type handshakeConn struct {
	net.Conn
	bound    time.Duration
	answered atomic.Bool
}

func (c *handshakeConn) SetReadDeadline(t time.Time) error {
	if !c.answered.Load() && !t.IsZero() {
		if b := time.Now().Add(c.bound); t.After(b) {
			t = b
		}
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *handshakeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.answered.Store(true)
	}
	return n, err
}

type zkConnKey struct {
	tb    testing.TB
	addrs string
}

var zkConns = struct {
	mu sync.Mutex
	m  map[zkConnKey]*zk.Conn
}{m: map[zkConnKey]*zk.Conn{}}
