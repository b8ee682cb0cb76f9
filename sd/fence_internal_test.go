package sd

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/internal/zkconn"
	"github.com/gracekit/gracekit/zktest"
)

// spyConn reports the relativeZxid of every setWatches frame written on it
// (the bytes on the wire, after zkconn's fence).
type spyConn struct {
	net.Conn
	setWatches chan<- int64
}

func (s *spyConn) Write(p []byte) (int, error) {
	if len(p) >= 20 && int32(binary.BigEndian.Uint32(p[8:12])) == zkconn.OpSetWatches {
		s.setWatches <- int64(binary.BigEndian.Uint64(p[12:20]))
	}
	return s.Conn.Write(p)
}

// Against a real server: a watch of the own session that a change made
// while it was disconnected should have fired fires after the reconnect,
// and one nothing touched does not (a relativeZxid of 0, go-zookeeper's
// when handed zeroes, would fire it; one too high would miss the change).
func TestTheOwnSessionsWatchesAfterAReconnectFireForWhatChangedMeanwhileOnly(t *testing.T) {
	t.Parallel()
	srv, dir := zktest.Shared(t), zktest.UniquePath(t)
	w := testutil.ZKConn(t, srv.Addrs())
	for _, p := range []string{dir, dir + "/a"} {
		if _, err := w.Create(p, []byte("1"), 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu      sync.Mutex
		last    net.Conn
		hold    = make(chan struct{})
		holding atomic.Bool
	)
	setWatches := make(chan int64, 4)
	dial := func(network, address string, timeout time.Duration) (net.Conn, error) {
		if holding.Load() {
			<-hold
		}
		conn, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		last = conn
		mu.Unlock()
		return &spyConn{Conn: conn, setWatches: setWatches}, nil
	}
	c, err := NewClient(srv.ConnectString(), SessionTimeout(10*time.Second), Dialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLimit)
	defer cancel()
	if err := c.awaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	zc := c.zk()
	_, _, data, err := zc.GetW(dir + "/a")
	if err != nil {
		t.Fatal(err)
	}
	_, _, children, err := zc.ChildrenW(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := c.ownReplyZxid.Load()
	if seen <= 0 {
		t.Fatalf("the last reply zxid %#x after two reads", seen)
	}

	holding.Store(true) // the reconnect waits for the change
	mu.Lock()
	_ = last.Close()
	mu.Unlock()
	if _, err := w.Set(dir+"/a", []byte("2"), -1); err != nil {
		t.Fatal(err)
	}
	close(hold)

	select {
	case rel := <-setWatches:
		if rel != seen {
			t.Errorf("setWatches relativeZxid %#x, want %#x, the last reply zxid before the reconnect", rel, seen)
		}
	case <-ctx.Done():
		t.Fatal("no setWatches after the reconnect")
	}
	select {
	case ev := <-data:
		if ev.Type != zk.EventNodeDataChanged {
			t.Fatalf("the data watch: %v, want a data change", ev)
		}
	case <-ctx.Done():
		t.Fatal("the change made while disconnected fired no watch after the reconnect")
	}
	// The server answers the sync after the re-send's events.
	if _, err := zc.Sync(dir); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-children:
		t.Fatalf("the children watch fired with nothing changed: %v", ev)
	default:
	}
}
