package zkconn

import (
	"encoding/binary"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/gracekit/gracekit/internal/zkwire"
)

// Fence is the zxid order of go-zookeeper's session, which its owner (sd's
// Client) keeps and its fenced connections read and write: the owner hands
// it down in Options.Fence and reads the same atomics.
type Fence struct {
	// Zxid is the highest zxid the session saw since its zxid order
	// began: each reply raises it, and each handshake sends at least it.
	Zxid *atomic.Int64
	// ReplyZxid is the session's last reply zxid, which go-zookeeper is
	// handed as 0 (see fencedConn); a new session's handshake resets it.
	ReplyZxid *atomic.Int64
	// Timeout is set to the session timeout (ms) the server granted.
	Timeout *atomic.Int64
	// Refused is set to the server that closed a handshake unanswered.
	Refused *atomic.Pointer[string]
	// Lost is asked at each dial: true hands go-zookeeper an expiry
	// (ExpiredConn) in place of a connection.
	Lost func() bool
	// HandshakeWait bounds the wait for a server's reply to a handshake.
	HandshakeWait func() time.Duration
}

// saw raises Zxid to z.
func (f *Fence) saw(z int64) {
	for {
		old := f.Zxid.Load()
		if z <= old || f.Zxid.CompareAndSwap(old, z) {
			return
		}
	}
}

// fenced wraps d's connections in fencedConns.
func (f *Fence) fenced(d DialFunc) DialFunc {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		if f.Lost() {
			return ExpiredConn(), nil
		}
		conn, err := d(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &fencedConn{Conn: conn, f: f, addr: address}, nil
	}
}

// fencedConn is a connection of go-zookeeper's session: it notes the
// zxid of every reply go-zookeeper reads (Fence.Zxid) and the session
// timeout the server granted, and raises the lastZxidSeen of its
// handshake, the connection's first write, to the highest zxid the
// session's zxid order saw. go-zookeeper sends its own last zxid, but sets
// it to 0 when its session expires, so its first handshake after an expiry
// would be taken by a server behind what the Client already read. The
// order starts anew only when the session is lost (sd's lost.go): the
// dialer then hands go-zookeeper an expiry instead of a connection.
//
// It also hands go-zookeeper every reply with its zxid zeroed, and keeps
// the zxid itself: go-zookeeper v1.0.4's receive loop writes its last
// zxid for each reply while its watch re-send reads it from another
// goroutine (go-zookeeper/zk#35, a data race the race detector reports).
// Given zeroes it never writes it, so nothing races, with no wait. The
// re-send's relativeZxid is then written here (setWatches): the session's
// last reply zxid before this connection, as the Java client sends it.
// Why here: go-zookeeper v1.0.4 has no option for it, and its dialer is
// the one place between it and the wire.
//
// go-zookeeper writes from one goroutine at a time, a frame per Write,
// and reads from one.
type fencedConn struct {
	net.Conn
	f       *Fence
	addr    string
	written bool
	rel     int64 // relativeZxid for setWatches: the session's last reply zxid before this connection

	// The reply stream, as read so far.
	hdr     [16]byte // the frame's length, xid and zxid
	have    int      // bytes of hdr read
	skip    int      // bytes of the frame's rest still to come
	replies bool     // the ConnectResponse (no xid) was read
	lost    bool     // a length made no sense: note nothing more
}

func (z *fencedConn) Write(p []byte) (int, error) {
	whole := len(p) >= 16 && int(binary.BigEndian.Uint32(p)) == len(p)-4
	if !z.written {
		z.written = true
		// length 4, protocolVersion 4, lastZxidSeen 8, timeOut 4, sessionId 8, ...
		if whole && len(p) >= 28 {
			if binary.BigEndian.Uint64(p[20:28]) == 0 {
				z.f.ReplyZxid.Store(0) // a new session: go-zookeeper's last zxid starts at 0 too
			}
			z.rel = z.f.ReplyZxid.Load()
		}
		if whole {
			own := int64(binary.BigEndian.Uint64(p[8:16]))
			if seen := zkwire.SendZxid(z.f.Zxid.Load()); seen > own {
				return z.rewrite(p, 8, seen)
			}
		}
		return z.Conn.Write(p)
	}
	// length 4, xid 4, type 4, relativeZxid 8, ...
	if whole && len(p) >= 20 && int32(binary.BigEndian.Uint32(p[8:12])) == OpSetWatches {
		return z.rewrite(p, 12, z.rel)
	}
	return z.Conn.Write(p)
}

// OpSetWatches is the type of go-zookeeper's watch re-send.
const OpSetWatches = 101

// rewrite writes p with the 8 bytes at off set to v, leaving the caller's
// bytes as they were.
func (z *fencedConn) rewrite(p []byte, off int, v int64) (int, error) {
	q := make([]byte, len(p))
	copy(q, p)
	binary.BigEndian.PutUint64(q[off:off+8], uint64(v))
	if _, err := z.Conn.Write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (z *fencedConn) Read(p []byte) (int, error) {
	n, err := z.Conn.Read(p)
	if !z.lost {
		z.scan(p[:n])
	}
	var ne net.Error
	if err != nil && n == 0 && z.written && !z.replies && z.have == 0 && !(errors.As(err, &ne) && ne.Timeout()) {
		// The server closed the handshake, as one behind the zxid it sent
		// does (or one not serving yet): the owner's Lost may ask it which.
		z.f.Refused.Store(&z.addr)
	}
	return n, err
}

// scan follows the frames in b, noting each reply header's zxid (the auth
// replies' aside; pings' too, as zkwire.Conn counts them: see its
// LastZxid), and zeroes it in b.
func (z *fencedConn) scan(b []byte) {
	for len(b) > 0 {
		if z.skip > 0 {
			k := min(z.skip, len(b))
			z.skip, b = z.skip-k, b[k:]
			continue
		}
		if z.have < 4 {
			k := copy(z.hdr[z.have:4], b)
			z.have, b = z.have+k, b[k:]
			if z.have < 4 {
				continue
			}
			// Every frame has 16 bytes at least: a reply's header, or
			// the ConnectResponse's 36.
			if size := binary.BigEndian.Uint32(z.hdr[:4]); size < 16 || size > zkwire.MaxFrame {
				z.lost = true
				return
			}
		}
		k := copy(z.hdr[z.have:], b)
		if z.replies {
			// go-zookeeper gets the reply's zxid as 0 (see fencedConn).
			for i := max(8, z.have); i < min(16, z.have+k); i++ {
				b[i-z.have] = 0
			}
		}
		z.have, b = z.have+k, b[k:]
		if z.have < len(z.hdr) {
			continue
		}
		if z.replies {
			xid := int32(binary.BigEndian.Uint32(z.hdr[4:8]))
			zxid := int64(binary.BigEndian.Uint64(z.hdr[8:16]))
			if xid != zkwire.XidAuth {
				z.f.saw(zxid)
			}
			if xid >= 0 && zxid > 0 {
				z.f.ReplyZxid.Store(zxid) // what go-zookeeper would have kept as its last zxid
			}
		} else if ms := int32(binary.BigEndian.Uint32(z.hdr[8:12])); ms > 0 {
			// The ConnectResponse: protocolVersion, timeOut, sessionId, ...
			z.f.Timeout.Store(int64(ms))
		}
		z.replies = true
		z.skip = int(binary.BigEndian.Uint32(z.hdr[:4])) - 12
		z.have = 0
	}
}

// SetReadDeadline bounds the handshake's read by Fence.HandshakeWait until
// the server's reply begins. go-zookeeper gives it ten times its receive
// timeout (about 67 s with a 10 s session timeout), and a server that
// accepts the connection while it starts may never answer it: the Client
// then waited that long before it tried again, while the server was up.
func (z *fencedConn) SetReadDeadline(t time.Time) error {
	if !z.replies && !t.IsZero() {
		if bound := time.Now().Add(z.f.HandshakeWait()); t.After(bound) {
			t = bound
		}
	}
	return z.Conn.SetReadDeadline(t)
}
