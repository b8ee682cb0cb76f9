package sd

import (
	"github.com/gracekit/gracekit/internal/zkconn"
	"github.com/gracekit/gracekit/internal/zkwire"
)

// SetDefaultWatchMode sets the mode of Instancers made without
// WithWatchMode, so that the sd tests run in either mode (see TestMain).
func SetDefaultWatchMode(m WatchMode) { defaultWatchMode = m }

// WatchSessionID is the session of c's watch session now (0 while there
// is none) and the server it is connected to.
func WatchSessionID(c *Client) (id int64, server string) {
	conn := watchConn(c)
	if conn == nil {
		return 0, ""
	}
	return conn.SessionID(), conn.Addr()
}

// watchView is c's watch session now; the zero view while there is none.
func watchView(c *Client) zkconn.WatchView {
	c.mu.Lock()
	ws := c.ws
	c.mu.Unlock()
	if ws == nil {
		return zkconn.WatchView{}
	}
	return ws.View()
}

// watchConn is c's watch session's connection now, nil while there is none.
func watchConn(c *Client) *zkwire.Conn { return watchView(c).Conn }

// WatchRoots lists the recursive watches c's watch session holds now.
func WatchRoots(c *Client) []string { return watchView(c).Roots }

// OwnSessionDialled tells whether c created its go-zookeeper connection.
func OwnSessionDialled(c *Client) bool { return c.zkIfAny() != nil }

// SeenZxid is the highest zxid c's sessions have seen: what the next
// handshake of either sends (each sends its own session's).
func SeenZxid(c *Client) int64 {
	z := c.zxid.Load()
	v := watchView(c)
	z = max(z, v.Zxid)
	if conn := v.Conn; conn != nil {
		z = max(z, conn.LastZxid())
	}
	return z
}

// Losses counts the sessions c gave up as lost (lost.go): its own
// session's and its watch session's. A session the server expired is not
// one: the client did not decide it.
func Losses(c *Client) (own, watch uint64) {
	c.zmu.Lock()
	own = c.zlineage
	c.zmu.Unlock()
	return own, watchView(c).Losses
}
