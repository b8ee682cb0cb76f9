package sd

import "time"

// minHandshakeWait is the least a handshake is given, whatever the
// session timeout and the number of servers.
const minHandshakeWait = time.Second

// handshakeWait bounds the wait for a server's reply to the handshake of
// the Client's own session, as ZooKeeper's Java client bounds its connect:
// the session timeout shared among the servers.
func (c *Client) handshakeWait() time.Duration {
	return max(c.opts.sessionTimeout/time.Duration(max(len(c.servers), 1)), minHandshakeWait)
}

// SetReadDeadline bounds the handshake's read by handshakeWait until the
// server's reply begins. go-zookeeper gives it ten times its receive
// timeout (about 67 s with a 10 s session timeout), and a server that
// accepts the connection while it starts may never answer it: the Client
// then waited that long before it tried again, while the server was up.
func (z *zxidConn) SetReadDeadline(t time.Time) error {
	if !z.replies && !t.IsZero() {
		if bound := time.Now().Add(z.c.handshakeWait()); t.After(bound) {
			t = bound
		}
	}
	return z.Conn.SetReadDeadline(t)
}
