package sd

// SetDefaultWatchMode sets the mode of Instancers made without
// WithWatchMode, so that the sd tests run in either mode (see TestMain).
func SetDefaultWatchMode(m WatchMode) { defaultWatchMode = m }

// WatchSessionID is the session of c's watch session now (0 while there
// is none) and the server it is connected to.
func WatchSessionID(c *Client) (id int64, server string) {
	c.mu.Lock()
	ws := c.ws
	c.mu.Unlock()
	if ws == nil {
		return 0, ""
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.conn == nil {
		return 0, ""
	}
	return ws.conn.SessionID(), ws.conn.Addr()
}

// WatchRoots lists the recursive watches c's watch session holds now.
func WatchRoots(c *Client) []string {
	c.mu.Lock()
	ws := c.ws
	c.mu.Unlock()
	if ws == nil {
		return nil
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	var out []string
	for d := range ws.roots {
		out = append(out, d)
	}
	return out
}

// OwnSessionDialled tells whether c created its go-zookeeper connection.
func OwnSessionDialled(c *Client) bool { return c.zkIfAny() != nil }

// SeenZxid is the highest zxid c's sessions have seen: what the next
// handshake of either sends.
func SeenZxid(c *Client) int64 {
	z := c.zxid.Load()
	c.mu.Lock()
	ws := c.ws
	c.mu.Unlock()
	if ws == nil {
		return z
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.conn != nil {
		z = max(z, ws.conn.LastZxid())
	}
	return z
}
