package zkconn

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"time"

	"github.com/gracekit/gracekit/internal/zkwire"
)

// Options is how one session's connections are made. Every connection
// gracekit opens to ZooKeeper comes from Dialer: go-zookeeper's sessions,
// the zkwire ones (watch sessions, bulk reads, probes) and the CLI's, so a
// connection setting is added here, once.
type Options struct {
	// Dial opens the raw connection. Nil: a net.Dialer that the ctx given
	// to Dialer ends too.
	Dial DialFunc
	// Layer is TLS and SASL (Layer.Wrap). Nil: plaintext without SASL.
	Layer *Layer
	// Admit, when set, is asked before each dial: an error refuses it.
	Admit func() error
	// Keep, when set, is handed each connection once secured, before the
	// fence: an error closes it and fails the dial with that error.
	Keep func(net.Conn) error
	// Fence is the zxid fence of a go-zookeeper session (fence.go); nil for
	// zkwire sessions, which send their last zxid themselves.
	Fence *Fence
	// Buffered reads through a 64 KiB buffer: go-zookeeper reads each
	// response with two small reads, a syscall each; a load of thousands
	// of nodes then spends more time in read(2) than anywhere else.
	Buffered bool
}

// Dialer is the dialer o describes: from the wire up, the raw dial, TLS
// and SASL, Admit and Keep, the fence and the read buffer. ctx ends the
// default raw dial (Options.Dial nil); context.Background() never does.
func Dialer(ctx context.Context, o Options) DialFunc {
	d := o.Dial
	if d == nil {
		d = func(network, address string, timeout time.Duration) (net.Conn, error) {
			return (&net.Dialer{Timeout: timeout}).DialContext(ctx, network, address)
		}
	}
	if o.Layer != nil {
		d = o.Layer.Wrap(d)
	}
	if o.Admit != nil || o.Keep != nil {
		d = kept(d, o.Admit, o.Keep)
	}
	if o.Fence != nil {
		d = o.Fence.fenced(d)
	}
	if o.Buffered {
		d = buffered(d)
	}
	return d
}

// kept is d with admit asked before each dial and keep handed each
// connection.
func kept(d DialFunc, admit func() error, keep func(net.Conn) error) DialFunc {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		if admit != nil {
			if err := admit(); err != nil {
				return nil, err
			}
		}
		conn, err := d(network, address, timeout)
		if err != nil {
			return nil, err
		}
		if keep != nil {
			if err := keep(conn); err != nil {
				_ = conn.Close()
				return nil, err
			}
		}
		return conn, nil
	}
}

// buffered wraps d's connections with a read buffer (Options.Buffered).
func buffered(d DialFunc) DialFunc {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := d(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, 64<<10)}, nil
	}
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// ExpiredConn is what a server that no longer holds a session answers to
// its handshake: a ConnectResponse with session id 0. A fenced dialer
// hands it to go-zookeeper in place of a connection when Fence.Lost says
// the session is lost: go-zookeeper, which never gives a session up by
// itself, then expires it as it would on the server's word (its watches
// end, and the session's owner hears StateExpired) and dials again for a
// new session, with zxid 0. Java's client has injectSessionExpiration for
// the same purpose, which Curator calls when it decides a session is lost.
func ExpiredConn() net.Conn {
	// length 36: protocolVersion 0, timeOut 0, sessionId 0, passwd (16 zero bytes)
	b := binary.BigEndian.AppendUint32(nil, 36)
	b = append(b, make([]byte, 16)...)
	b = binary.BigEndian.AppendUint32(b, 16)
	return &expiredConn{resp: append(b, make([]byte, 16)...)}
}

type expiredConn struct {
	resp []byte
}

func (e *expiredConn) Read(p []byte) (int, error) {
	if len(e.resp) == 0 {
		return 0, io.EOF
	}
	n := copy(p, e.resp)
	e.resp = e.resp[n:]
	return n, nil
}

func (e *expiredConn) Write(p []byte) (int, error)      { return len(p), nil }
func (e *expiredConn) Close() error                     { return nil }
func (e *expiredConn) LocalAddr() net.Addr              { return lostAddr{} }
func (e *expiredConn) RemoteAddr() net.Addr             { return lostAddr{} }
func (e *expiredConn) SetDeadline(time.Time) error      { return nil }
func (e *expiredConn) SetReadDeadline(time.Time) error  { return nil }
func (e *expiredConn) SetWriteDeadline(time.Time) error { return nil }

type lostAddr struct{}

func (lostAddr) Network() string { return "lost" }
func (lostAddr) String() string  { return "lost-session" }

// Open dials a zkwire session with cfg over Dialer(ctx, o), which replaces
// cfg.Dial: the watch sessions, bulk reads and probes of sd's Client.
func Open(ctx context.Context, o Options, cfg zkwire.Config) (*zkwire.Conn, error) {
	cfg.Dial = Dialer(ctx, o)
	return zkwire.Dial(ctx, cfg)
}
