package sd

import "time"

// SetDefaultWatchMode sets the mode of Instancers made without
// WithWatchMode, so that the sd tests run in either mode (see TestMain).
func SetDefaultWatchMode(m WatchMode) { defaultWatchMode = m }

// AheadSession is the session of c's watch session opened ahead (0 while
// it dials, or when it failed or was not asked for) and whether a watch
// session took it.
func AheadSession(c *Client) (id int64, taken bool) {
	a := c.ahead
	if a == nil {
		return 0, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn != nil {
		id = a.conn.SessionID()
	}
	return id, a.taken && a.conn != nil && a.conn.Err() == nil
}

// AheadDone reports whether c's watch session ahead finished dialling.
func AheadDone(c *Client) bool {
	select {
	case <-c.ahead.ready:
		return true
	default:
		return false
	}
}

// SetZKGrace sets how long a Client's own session waits for a reason to
// be dialled; the returned func restores it.
func SetZKGrace(d time.Duration) (restore func()) {
	old := zkGrace
	zkGrace = d
	return func() { zkGrace = old }
}

// SetWatchAheadIdle shortens how long an untaken watch session ahead is
// kept; the returned func restores it.
func SetWatchAheadIdle(d time.Duration) (restore func()) {
	old := watchAheadIdle
	watchAheadIdle = d
	return func() { watchAheadIdle = old }
}
