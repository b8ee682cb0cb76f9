package sd_test

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
)

// failAddWatch is a dialer whose connections answer the first left
// addWatch requests with error code instead of the server's reply (the
// request reaches the server; every other reply passes).
type failAddWatch struct {
	code int32
	left atomic.Int32
}

func (d *failAddWatch) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	fc := &failAddWatchConn{d: d, xids: map[int32]bool{}}
	fc.frameReader = &frameReader{Conn: c, edit: func(frame []byte) []byte {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		if len(frame) < 20 || !fc.xids[int32(binary.BigEndian.Uint32(frame[4:8]))] {
			return frame
		}
		// ReplyHeader: xid 4, zxid 8, err 4, after the length.
		binary.BigEndian.PutUint32(frame[16:20], uint32(d.code))
		return frame // an addWatch reply is its header alone
	}}
	return fc, nil
}

type failAddWatchConn struct {
	*frameReader
	d      *failAddWatch
	mu     sync.Mutex
	xids   map[int32]bool // the addWatch requests whose reply is replaced
	writes int
}

func (c *failAddWatchConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	if c.writes > 1 { // the handshake has no xid
		for _, at := range opOffsets(b) {
			if binary.BigEndian.Uint32(b[at:]) == 106 && c.d.left.Add(-1) >= 0 {
				c.xids[int32(binary.BigEndian.Uint32(b[at-4:]))] = true
			}
		}
	}
	c.mu.Unlock()
	return c.Conn.Write(b)
}

// A throttled addWatch (ZooKeeper 3.7+ sheds requests under load) is not
// a server without persistent watches: the watch session tries again, and
// the Instancer keeps its one recursive watch instead of falling back to a
// watch per node for good. Only UNIMPLEMENTED (ZooKeeper 3.5) and
// MARSHALLINGERROR (WatchManagerOptimized) switch it, see
// TestRefusedAddWatchFallsBackToPerNode.
func TestAThrottledAddWatchIsTriedAgainNotFallenBackFrom(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider := newClient(t, c)
	register(t, provider, instance("throttled", 7401), at)
	dial := &failAddWatch{code: -127} // ZooKeeper's THROTTLEDOP
	dial.left.Store(2)
	consumer := newClient(t, c, sd.Dialer(dial.Dial))
	in, ch := newInstancer(t, consumer, "throttled", sd.WithWatchMode(sd.WatchRecursive), at)
	waitSet(t, ch, "127.0.0.1:7401")
	if mode := in.Stats().WatchMode; mode != sd.WatchRecursive {
		t.Fatalf("after a throttled addWatch the Instancer watches in mode %v, want %v", mode, sd.WatchRecursive)
	}
	if left := dial.left.Load(); left > 0 {
		t.Fatalf("%d throttled answers were not given: the test did not throttle", left)
	}
	if st := consumer.WatchSessionStats(); st.Created < 1 {
		t.Fatalf("watch sessions %+v: none came up after the throttled tries", st)
	}
	testutil.WaitFor(t, "the service's recursive watch", func() bool {
		for _, r := range sd.WatchRoots(consumer) {
			if r == base+"/throttled" {
				return true
			}
		}
		return false
	})
	// It follows changes with that watch.
	register(t, provider, instance("throttled", 7402), at)
	waitSet(t, ch, "127.0.0.1:7401", "127.0.0.1:7402")
}
