package zkconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// DialFunc opens a connection to a ZooKeeper server; net.DialTimeout is one.
type DialFunc func(network, address string, timeout time.Duration) (net.Conn, error)

// Error is a connection a server refused, or that failed in a way a
// setting explains. It names the server, the step and what to change.
type Error struct {
	Server  string // host:port
	Step    string // "TLS handshake", "SASL DIGEST-MD5", "session"
	Err     error
	Fix     string // what to change
	Setting bool   // retrying with the same settings will not help
}

func (e *Error) Error() string {
	s := fmt.Sprintf("zkconn: %s with ZooKeeper server %s failed: %v", e.Step, e.Server, e.Err)
	if e.Fix != "" {
		s += ": " + e.Fix
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// ErrSASLRequired is the server's answer to a request from a session that
// did not authenticate with SASL, where sessionRequireClientSASLAuth=true.
var ErrSASLRequired = errors.New("the server requires SASL authentication (sessionRequireClientSASLAuth) and closed the session")

// codeSASLRequired is ZooKeeper's SESSIONCLOSEDREQUIRESASLAUTH.
const codeSASLRequired = -124

// Wrap returns d with l's security: TLS under everything the caller reads
// and writes, SASL after the session handshake and before the caller sees
// its answer, and a check of the session's first reply (a server that
// requires SASL of a client without it answers it -124). A server that
// refused a connection for a setting is not dialled again for DefaultHold;
// the dial returns the refusal at once.
func (l *Layer) Wrap(d DialFunc) DialFunc {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		if e := l.heldBack(address); e != nil {
			return nil, e
		}
		start := time.Now()
		raw, err := d(network, address, timeout)
		if err != nil {
			return nil, err
		}
		conn := raw
		if l.tls != nil {
			// go-zookeeper dials with a 1 s timeout, meant for TCP; a TLS
			// handshake with a JVM that has just started (or is loaded)
			// can take longer, and a failed one costs a second's retry.
			tc, err := l.handshake(raw, d, address, max(timeout-time.Since(start), MinHandshake))
			if err != nil {
				_ = raw.Close()
				return nil, err
			}
			conn = tc
		}
		return &secConn{Conn: conn, l: l, addr: address, dial: d}, nil
	}
}

// MinHandshake is the least time a TLS handshake is given.
const MinHandshake = 3 * time.Second

func (l *Layer) handshake(raw net.Conn, d DialFunc, address string, timeout time.Duration) (*tls.Conn, error) {
	conf := l.tls.Clone()
	conf.ClientSessionCache = serverCache{l.sessionCache(), address}
	conf.ServerName = l.sec.TLS.ServerName
	if conf.ServerName == "" {
		if host, _, err := net.SplitHostPort(address); err == nil {
			conf.ServerName = host
		}
	}
	tc := tls.Client(raw, conf)
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, time.Millisecond))
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, l.tlsError(address, conf.ServerName, err, d)
	}
	return tc, nil
}

// tlsError says what a TLS failure means and what to change; a verification
// failure is a setting, a network one is not.
func (l *Layer) tlsError(addr, name string, err error, dial DialFunc) error {
	e := &Error{Server: addr, Step: "TLS handshake", Err: err, Setting: true}
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var rec tls.RecordHeaderError
	switch {
	case errors.As(err, &unknown):
		e.Fix = "the server's certificate is not signed by a CA of " + nameCA + "; give the CA bundle that signed the servers' certificates"
	case errors.As(err, &host):
		e.Fix = fmt.Sprintf("the server's certificate is not valid for %q; set %s to a name the certificate holds (or have it re-issued with that name)", name, nameServer)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		e.Fix = "the server's certificate has expired or is not yet valid (check the clocks); renew the server's certificate (ssl.keyStore.location)"
	case errors.As(err, &invalid):
		e.Fix = "the server's certificate cannot be used: renew it, or check " + nameCA
	case errors.As(err, &rec):
		e.Fix = "the server did not answer TLS: is this its secureClientPort? A plaintext clientPort needs no " + nameTLS
	case (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) && probePlain(dial, addr):
		// A closed handshake is also a server over its maxClientCnxns,
		// or stopping: only one that answers plaintext is a setting.
		e.Fix = "the server closed the TLS handshake and answers plaintext: this is its clientPort, not its secureClientPort; name the secureClientPort, or drop " + nameTLS
	case isRemoteAlert(err):
		e.Fix = remoteAlertFix(err)
	default:
		e.Setting = false // a timeout, a reset: the network, not a setting
	}
	if e.Setting {
		l.refused(e)
	}
	return e
}

// isRemoteAlert tells a TLS alert the server sent (crypto/tls reports them
// as a net.OpError "remote error").
func isRemoteAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

func remoteAlertFix(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "certificate required"), strings.Contains(msg, "bad certificate"),
		strings.Contains(msg, "unknown certificate authority"), strings.Contains(msg, "certificate unknown"),
		strings.Contains(msg, "certificate expired"), strings.Contains(msg, "certificate revoked"):
		return "the server refused the client certificate (ssl.clientAuth=need): set " + nameCert + " to a certificate, not expired, signed by a CA of the server's ssl.trustStore"
	case strings.Contains(msg, "protocol version"):
		return "the server does not speak the minimum TLS version asked (ZooKeeper 3.8 speaks TLSv1.2 unless ssl.protocol/ssl.enabledProtocols say otherwise): lower the minimum version (sd.TLSConfig.MinVersion, GRACEKIT_ZK_TLS_MIN_VERSION, -tls-min-version) or enable TLSv1.3 on the server"
	}
	return "the server refused the TLS connection: check " + nameTLS + " against the server's ssl.* settings"
}

// secConn is a connection that has done TLS, if any: its first Read reads
// the server's answer to the session handshake (the ConnectRequest the
// caller wrote) itself, authenticates with SASL if the session was granted
// and SASL is set, and only then hands the answer to the caller. It then
// watches the header of the session's first reply for -124. Reads and
// writes come each from one goroutine, as go-zookeeper and zkwire do.
type secConn struct {
	net.Conn
	l    *Layer
	addr string
	dial DialFunc // the raw dialer, for probeTLS

	written bool   // the ConnectRequest went out
	ready   bool   // the handshake answer was read
	pending []byte // the answer, or what is left of it, for the caller
	first   []byte // a reply's header, as it passes (see watch)
	skip    int    // bytes of an auth reply still to pass
	watched bool   // a reply that tells was seen

	closeOnce sync.Once
}

func (c *secConn) Write(p []byte) (int, error) {
	c.written = true
	return c.Conn.Write(p)
}

func (c *secConn) Read(p []byte) (int, error) {
	if !c.ready && c.written {
		resp, err := c.connect()
		if err != nil {
			return 0, err
		}
		c.ready, c.pending = true, resp
	}
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	n, err := c.Conn.Read(p)
	if !c.watched && n > 0 {
		if e := c.watch(p[:n]); e != nil {
			return 0, e
		}
	}
	return n, err
}

// connect reads the ConnectResponse frame, then does SASL on a granted
// session, and returns the frame for the caller.
func (c *secConn) connect() ([]byte, error) {
	frame, err := readFrame(c.Conn)
	if err != nil {
		return nil, c.readError(err, "session handshake")
	}
	// protocolVersion, timeOut, sessionId, passwd: a session id 0 is a
	// refused or expired session, the caller's to handle.
	granted := len(frame) >= 20 && binary.BigEndian.Uint64(frame[12:20]) != 0
	if c.l.sec.SASL == nil || !granted {
		return frame, nil // watch tells how the session's first reply went
	}
	if err := c.sasl(); err != nil {
		return nil, err
	}
	c.watched = true // authenticated: nothing to watch for
	c.l.succeeded(c.addr)
	return frame, nil
}

// watch follows the replies' headers as they pass, up to the first that
// is not an auth reply (digest auth is answered before anything is
// checked): -124 there is a server that requires SASL of a session
// without it. It answers the caller with an error instead of the reply,
// so that the caller sees a lost connection (and asks its owner, who has
// the Layer's Failure).
func (c *secConn) watch(b []byte) error {
	for len(b) > 0 {
		if c.skip > 0 {
			k := min(c.skip, len(b))
			c.skip, b = c.skip-k, b[k:]
			continue
		}
		k := min(20-len(c.first), len(b)) // length, xid, zxid, err
		c.first, b = append(c.first, b[:k]...), b[k:]
		if len(c.first) < 20 {
			return nil
		}
		size := int(binary.BigEndian.Uint32(c.first[0:4]))
		xid := int32(binary.BigEndian.Uint32(c.first[4:8]))
		code := int32(binary.BigEndian.Uint32(c.first[16:20]))
		c.first = c.first[:0]
		if xid == xidAuth && size >= 16 {
			c.skip = size - 16
			continue
		}
		c.watched = true
		if code == codeSASLRequired {
			e := &Error{Server: c.addr, Step: "session", Err: ErrSASLRequired, Setting: true,
				Fix: "set " + nameSASL + " to a user of the server's JAAS Server section"}
			c.l.refused(e)
			_ = c.Close()
			return e
		}
		c.l.succeeded(c.addr)
		return nil
	}
	return nil
}

// xidAuth is the xid of an auth request's reply.
const xidAuth = -4

// readError explains a failed read of a handshake answer: a TLS alert
// (TLS 1.3 sends a client certificate's refusal after the handshake), or a
// plaintext server that sent a TLS port's reply, or the network.
func (c *secConn) readError(err error, step string) error {
	if isRemoteAlert(err) {
		e := &Error{Server: c.addr, Step: "TLS handshake", Err: err, Fix: remoteAlertFix(err), Setting: true}
		c.l.refused(e)
		return e
	}
	var big *frameError
	if errors.As(err, &big) && big.tls {
		e := &Error{Server: c.addr, Step: step, Err: errors.New("the server answered with TLS"), Setting: true,
			Fix: "this is a TLS port (secureClientPort): set " + nameTLS + ", or use the server's plaintext clientPort"}
		c.l.refused(e)
		return e
	}
	if c.l.tls == nil && errors.Is(err, io.EOF) && probeTLS(c.dial, c.addr) {
		e := &Error{Server: c.addr, Step: step, Err: errors.New("the server closed a plaintext handshake and answers TLS"), Setting: true,
			Fix: "this is a TLS port (secureClientPort): set " + nameTLS + ", or use the server's plaintext clientPort"}
		c.l.refused(e)
		return e
	}
	return err // the caller's own handling (a server behind our zxid closes it, for one)
}

// probePlain tells whether addr answers ZooKeeper in plaintext: a
// four-letter word gets an answer (its output, or that it is not
// allowed) from a plaintext port and a closed connection from a TLS one.
// It opens no session.
func probePlain(d DialFunc, addr string) bool {
	const wait = MinHandshake
	raw, err := d("tcp", addr, wait)
	if err != nil {
		return false
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(wait))
	if _, err := raw.Write([]byte("srvr")); err != nil {
		return false
	}
	n, _ := raw.Read(make([]byte, 1))
	return n > 0
}

// probeTLS tells whether addr answers a TLS ClientHello: a Netty TLS port
// closes a plaintext handshake without a word, as a server behind the
// client's zxid does, and only asking in TLS tells the two apart. It costs
// a connection, and only when a plaintext handshake was closed.
func probeTLS(d DialFunc, addr string) bool {
	const wait = MinHandshake // a loaded JVM's TLS is slow to answer
	raw, err := d("tcp", addr, wait)
	if err != nil {
		return false
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(wait))
	tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) // only asks whether it speaks TLS; sends nothing else
	err = tc.Handshake()
	return err == nil || isRemoteAlert(err)
}

// frameError is a length prefix that makes no sense.
type frameError struct {
	size uint32
	tls  bool // the bytes are a TLS record header: a TLS port
}

func (e *frameError) Error() string {
	return fmt.Sprintf("zkconn: frame length %d out of range", e.size)
}

// maxHandshakeFrame bounds the handshake's and SASL's frames.
const maxHandshakeFrame = 1 << 20

func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxHandshakeFrame {
		// A TLS record: content type 21 (alert) or 22 (handshake), version 3.x.
		return nil, &frameError{size: size, tls: (n[0] == 21 || n[0] == 22) && n[1] == 3}
	}
	b := make([]byte, 4+size)
	copy(b, n[:])
	if _, err := io.ReadFull(r, b[4:]); err != nil {
		return nil, err
	}
	return b, nil
}

// Close is idempotent: watch closes the connection under its caller.
func (c *secConn) Close() error {
	var err error
	c.closeOnce.Do(func() { err = c.Conn.Close() })
	return err
}
