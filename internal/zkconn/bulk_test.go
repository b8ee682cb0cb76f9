package zkconn

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/internal/zkwire"
	"github.com/gracekit/gracekit/zktest"
)

// A bulk session opened ahead of a load that turns out small is closed
// unused; one whose server never answers the handshake is closed at once,
// not at the end of the handshake's timeout.
func TestBulkSessionCloseInterruptsAHandshake(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c // never answered
		}
		close(accepted)
	}()
	const handshakeTimeout = time.Minute
	s := OpenBulk(context.Background(), handshakeTimeout, dialBulk(ln.Addr().String(), handshakeTimeout))
	c, ok := <-accepted
	if !ok {
		t.Fatal("the bulk session never dialled")
	}
	defer c.Close()
	closed := make(chan struct{})
	go func() { s.Close(); s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(handshakeTimeout / 2):
		t.Fatal("close waited for the handshake's timeout")
	}
	if err := s.Read("", []string{"x"}, func(int, []zkwire.Read) {}); err == nil {
		t.Fatal("a read after close succeeded")
	}
}

func TestBulkSessionReadsBatchesInOrder(t *testing.T) {
	t.Parallel()
	c, dir := zktest.Shared(t), zktest.UniquePath(t)
	conn := testutil.ZKConn(t, c.Addrs())
	const n = 517
	var names, paths []string
	if _, err := conn.Create(dir, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		p := fmt.Sprintf("%s/n%04d", dir, i)
		names, paths = append(names, p[len(dir)+1:]), append(paths, p)
		if _, err := conn.Create(p, []byte(p), 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	names, paths = append(names, "gone"), append(paths, dir+"/gone")
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLimit)
	defer cancel()
	s := OpenBulk(ctx, testutil.WaitLimit, dialBulk(c.Addrs()[0], testutil.WaitLimit))
	defer s.Close()
	var firsts []int
	next := 0
	err := s.Read(dir, names, func(first int, res []zkwire.Read) {
		firsts = append(firsts, first)
		if first != next {
			t.Errorf("batch at %d, want %d", first, next)
		}
		for i, r := range res {
			p := paths[first+i]
			switch {
			case p == dir+"/gone" && r.Err != zkwire.CodeNoNode:
				t.Errorf("%s read: %+v", p, r)
			case p != dir+"/gone" && (r.Err != 0 || string(r.Data) != p):
				t.Errorf("%s: %q err=%d", p, r.Data, r.Err)
			}
		}
		next = first + len(res)
	})
	if err != nil || next != len(paths) || len(firsts) != len(batches(len(paths))) {
		t.Fatalf("read: %v; %d of %d results in batches at %v", err, next, len(paths), firsts)
	}
}

func dialBulk(addr string, timeout time.Duration) func(context.Context) (*zkwire.Conn, error) {
	return func(ctx context.Context) (*zkwire.Conn, error) {
		return zkwire.Dial(ctx, zkwire.Config{Addr: addr, SessionTimeout: timeout})
	}
}

// batches covers every node once, in batches of maxBatch at most, four
// or more when there are enough nodes, the last ones smaller.
func TestBatchesSplitAReadWithASmallTail(t *testing.T) {
	for n := 1; n <= 25_000; n += 1 + n/50 {
		sizes := batches(n)
		sum := 0
		for _, s := range sizes {
			if s < 1 || s > maxBatch {
				t.Fatalf("n=%d: batch of %d in %v", n, s, sizes)
			}
			sum += s
		}
		if sum != n {
			t.Fatalf("n=%d: batches %v read %d", n, sizes, sum)
		}
		if n >= 4*batchMin && len(sizes) < 4 {
			t.Fatalf("n=%d: %d batches, want four or more", n, len(sizes))
		}
		if k := len(sizes); k > 1 && sizes[k-1] >= sizes[0] {
			t.Fatalf("n=%d: the last batch is not the smallest: %v", n, sizes)
		}
	}
	if got := batches(1000); !slices.Equal(got, []int{400, 300, 200, 100}) {
		t.Fatalf("batches(1000) = %v", got)
	}
}
