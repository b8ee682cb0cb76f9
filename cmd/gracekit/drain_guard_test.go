package main

import (
	"encoding/binary"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
)

// The opcodes of go-zookeeper's requests that write a node's data.
const (
	opSetData = 5
	opMulti   = 14
)

// writeBarrier is a dialer whose sessions each hold their first setData
// or multi until want sessions hold one, then send them all: drains run
// at once each count the service before any of them writes, as two
// operators' drains can.
type writeBarrier struct {
	want    int
	mu      sync.Mutex
	held    int
	all     chan struct{} // closed when want writes are held
	missed  bool          // the wait ended without them
	timeout time.Duration
}

func newWriteBarrier(want int) *writeBarrier {
	return &writeBarrier{want: want, all: make(chan struct{}), timeout: testutil.WaitLimit}
}

func (b *writeBarrier) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &barrierConn{Conn: c, b: b}, nil
}

func (b *writeBarrier) wait() {
	b.mu.Lock()
	b.held++
	if b.held == b.want {
		close(b.all)
	}
	b.mu.Unlock()
	t := time.NewTimer(b.timeout)
	defer t.Stop()
	select {
	case <-b.all:
	case <-t.C:
		b.mu.Lock()
		b.missed = true
		b.mu.Unlock()
	}
}

// barrierConn counts writes without a lock: go-zookeeper writes from one
// goroutine. The first write is the connect request, which has no
// header; each later one is a frame: length, xid, opcode.
type barrierConn struct {
	net.Conn
	b      *writeBarrier
	writes int
	held   bool
}

func (c *barrierConn) Write(p []byte) (int, error) {
	c.writes++
	if c.writes > 1 && !c.held && len(p) >= 12 {
		if op := int32(binary.BigEndian.Uint32(p[8:12])); op == opSetData || op == opMulti {
			c.held = true
			c.b.wait()
		}
	}
	return c.Conn.Write(p)
}

// Issue 40: two operators drain the two instances of a service at once,
// with -min-up 1. Each counts the other UP before either writes; the
// guard and the write are one decision, so exactly one drain succeeds,
// the other is refused, and one instance stays UP.
func TestTwoDrainsAtOnceLeaveMinUpInstancesUp(t *testing.T) {
	c := zkServer(t)
	base := basePath("drain-race")
	cl := newClient(t, c)
	register(t, cl, base, sd.Instance{Name: "quote", ID: "q1", Address: "127.0.0.1", Port: 8081})
	register(t, cl, base, sd.Instance{Name: "quote", ID: "q2", Address: "127.0.0.1", Port: 8082})
	b := newWriteBarrier(2)
	dialer = b.Dial
	t.Cleanup(func() { dialer = defaultDialer })

	type result struct {
		code        int
		out, stderr string
	}
	results := make([]result, 2)
	var wg sync.WaitGroup
	for i, id := range []string{"q1", "q2"} {
		wg.Go(func() {
			r := &results[i]
			r.code, r.out, r.stderr = gk(t, on(c, base, "drain", "quote", id, "-min-up", "1")...)
		})
	}
	wg.Wait()
	if b.missed {
		t.Fatalf("the two drains did not both reach their write: %+v", results)
	}
	var ok, refused int
	for _, r := range results {
		switch {
		case r.code == exitOK:
			ok++
		case r.code == exitRefused && strings.Contains(r.stderr, "refused"):
			refused++
		}
	}
	up := 0
	for _, in := range lsJSON(t, on(c, base, "ls", "quote")...).Services[0].Instances {
		if in.Status == string(sd.StatusUp) && in.DrainedBy == "" {
			up++
		}
	}
	if ok != 1 || refused != 1 || up != 1 {
		t.Fatalf("two drains at once with -min-up 1: %d drained, %d refused, %d instances UP after; want 1, 1, 1\n%+v", ok, refused, up, results)
	}
}
