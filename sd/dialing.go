package sd

import (
	"context"
	"net"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/zkconn"
	"github.com/gracekit/gracekit/internal/zkwire"
)

// How the Client's connections are made. Every one comes from
// zkconn.Dialer (go-zookeeper's) or zkconn.Open (zkwire's) with the
// options dialing gives: a connection setting is added there.

// dialing is what every connection of the Client shares: the dialer option
// (without one, a net.Dialer that the dial's ctx ends too, so that a Close
// ends a dial to a server that drops SYNs at once), TLS and SASL.
func (c *Client) dialing() zkconn.Options {
	return zkconn.Options{Dial: zkconn.DialFunc(c.opts.dialer), Layer: c.sec}
}

// ownDialing is how the Client's own (go-zookeeper) session dials: the
// dialer option, TLS and SASL, the zxid fence (its order is the Client's:
// lost.go), and a read buffer. A dial is refused once the Client is closed,
// and the socket dialled last is kept for Close: go-zookeeper's Close does
// not end a handshake waiting on a server that never answers, which would
// hold its goroutines (and Close) for the session timeout.
func (c *Client) ownDialing() zkconn.Options {
	o := c.dialing()
	o.Admit = func() error {
		select {
		case <-c.done:
			return zk.ErrClosing
		default:
			return nil
		}
	}
	o.Keep = func(conn net.Conn) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closed {
			return zk.ErrClosing
		}
		c.sock = conn
		return nil
	}
	o.Fence = &zkconn.Fence{
		Zxid: &c.zxid, ReplyZxid: &c.ownReplyZxid, Timeout: &c.ownTimeout, Refused: &c.ownRefused,
		Lost: c.ownLost, HandshakeWait: c.handshakeWait,
	}
	o.Buffered = true
	return o
}

// minHandshakeWait is the least a handshake is given, whatever the
// session timeout and the number of servers.
const minHandshakeWait = time.Second

// handshakeWait bounds the wait for a server's reply to the handshake of
// the Client's sessions, as ZooKeeper's Java client bounds its connect:
// the session timeout shared among the servers.
func (c *Client) handshakeWait() time.Duration {
	return max(c.opts.sessionTimeout/time.Duration(max(len(c.servers), 1)), minHandshakeWait)
}

// dialWatch opens a read-only session to addr, authenticated as the Client
// is, resuming session sid when it is not 0. Its handshake sends lastZxid,
// the highest zxid the caller's session saw in its zxid order (its
// previous connections and those before an expiry included), so that a
// server behind what it read refuses it and the caller tries the next one.
func (c *Client) dialWatch(ctx context.Context, addr string, sid int64, passwd []byte, lastZxid int64, onEvent func(uint64, zkwire.WatcherEvent)) (*zkwire.Conn, error) {
	var auth []zkwire.Auth
	if c.opts.user != "" {
		auth = []zkwire.Auth{{Scheme: "digest", Data: []byte(c.opts.user + ":" + c.opts.password)}}
	}
	return zkconn.Open(ctx, c.dialing(), zkwire.Config{
		Addr: addr, SessionTimeout: c.opts.sessionTimeout, HandshakeTimeout: c.handshakeWait(),
		Auth: auth, Session: sid, Passwd: passwd, OnEvent: onEvent, LastZxid: lastZxid,
	})
}
