package zktest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gracekit/gracekit/internal/zkwire"
)

// SessionRecorder is a dialer for go-zookeeper's zk.WithDialer that notes the
// session id and password from every connect handshake, so that a test can
// later expire that session on purpose with Expire.
//
// ZooKeeper expires a session when another client attaches to it with the
// same id and password and closes it; that is the only way to force it
// from outside, and the password is not exported by the client.
type SessionRecorder struct {
	dial     func(network, address string, timeout time.Duration) (net.Conn, error)
	mu       sync.Mutex
	passwd   map[int64][]byte
	lastID   int64
	lastAddr string
}

// NewSessionRecorder returns an empty recorder.
func NewSessionRecorder() *SessionRecorder {
	return NewSessionRecorderDialer(net.DialTimeout)
}

// NewSessionRecorderDialer returns an empty recorder whose Dial and Expire
// connect with dial: a TLS dialer, say, for a server's SecureAddr (the
// TLS option). The handshake is read above dial, in clear.
func NewSessionRecorderDialer(dial func(network, address string, timeout time.Duration) (net.Conn, error)) *SessionRecorder {
	return &SessionRecorder{dial: dial, passwd: map[int64][]byte{}}
}

// Dial has the shape of zk.Dialer.
func (r *SessionRecorder) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := r.dial(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, r: r, addr: address}, nil
}

// LastSession is the session id of the latest handshake.
func (r *SessionRecorder) LastSession() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastID
}

func (r *SessionRecorder) record(addr string, id int64, passwd []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id == 0 {
		return
	}
	r.passwd[id] = append([]byte(nil), passwd...)
	r.lastID, r.lastAddr = id, addr
}

// Expire ends session id on the server at addr: it attaches to the session
// and closes it, again until the server no longer knows it (a client that
// resumes its session at once takes it back in between, and the server
// then drops our connection). The owning
// client sees zk.StateExpired at its next contact.
func (r *SessionRecorder) Expire(addr string, id int64) error {
	r.mu.Lock()
	passwd, ok := r.passwd[id]
	r.mu.Unlock()
	if !ok {
		return fmt.Errorf("zktest: no handshake recorded for session 0x%x", id)
	}
	for try := range 20 {
		closed, err := r.attachAndClose(addr, id, passwd)
		switch {
		case errors.Is(err, errGone) && try == 0:
			return fmt.Errorf("zktest: session 0x%x is already gone", id)
		case errors.Is(err, errGone), closed:
			return nil
		case errors.Is(err, io.EOF):
			// The client resumed its session meanwhile, and the server
			// dropped our connection for it: again.
		case err != nil:
			return fmt.Errorf("zktest: expire session (try %d): %w", try, err)
		}
	}
	return fmt.Errorf("zktest: session 0x%x outlived 20 closes: its client keeps resuming it", id)
}

var errGone = errors.New("zktest: no such session")

// attachAndClose attaches to session id and closes it; closed tells that
// the server answered the close (errGone: it did not know the session).
func (r *SessionRecorder) attachAndClose(addr string, id int64, passwd []byte) (closed bool, err error) {
	conn, err := r.dial("tcp", addr, 2*time.Second)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := zkwire.WriteFrame(conn, zkwire.ConnectRequest(30*time.Second, id, passwd)); err != nil {
		return false, err
	}
	resp, err := zkwire.ReadFrame(conn)
	if err != nil {
		return false, err
	}
	if zkwire.SessionOf(resp) != id {
		return false, errGone
	}
	if err := zkwire.WriteFrame(conn, zkwire.CloseSession(1)); err != nil {
		return false, err
	}
	b, err := zkwire.ReadFrame(conn)
	if err != nil {
		return false, err
	}
	h, _, err := zkwire.ParseReplyHeader(b)
	return err == nil && h.Xid == 1 && h.Err == 0, err
}

// sniffConn parses the first frame the server sends, the ConnectResponse.
type sniffConn struct {
	net.Conn
	r    *SessionRecorder
	addr string
	buf  []byte
	done bool
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.done && n > 0 {
		c.buf = append(c.buf, p[:n]...)
		if len(c.buf) >= 4 {
			size := int(binary.BigEndian.Uint32(c.buf[:4]))
			if len(c.buf) >= 4+size {
				c.done = true
				c.parse(c.buf[4 : 4+size])
				c.buf = nil
			}
		}
	}
	return n, err
}

// parse reads ConnectResponse: protocolVersion, timeOut, sessionId, passwd.
func (c *sniffConn) parse(b []byte) {
	if len(b) < 20 {
		return
	}
	id := int64(binary.BigEndian.Uint64(b[8:16]))
	plen := int(binary.BigEndian.Uint32(b[16:20]))
	if plen < 0 || len(b) < 20+plen {
		return
	}
	c.r.record(c.addr, id, b[20:20+plen])
}
