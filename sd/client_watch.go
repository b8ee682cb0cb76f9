package sd

import "github.com/gracekit/gracekit/internal/zkconn"

// The Client's side of its watch session, which lives in the connection
// layer (zkconn.WatchSession) and holds no Client: what it needs is handed
// down here, and its states come back as the Client's.

// WatchSessionStats count a Client's watch sessions since NewClient.
type WatchSessionStats struct {
	Created int64 // sessions the server created
	Resumed int64 // reconnects that kept their session
}

// watchConfig is the Client's side of its watch session.
func (c *Client) watchConfig() zkconn.WatchConfig {
	return zkconn.WatchConfig{
		Logger: c.logger, SessionTimeout: c.SessionTimeout(),
		Servers: c.hp.List, Dial: c.dialWatch, Behind: c.behind, OnState: c.dispatchWatch,
	}
}

// stateOfWatch maps the watch session's states to the package's own.
func stateOfWatch(s zkconn.WatchState) State {
	switch s {
	case zkconn.WatchConnecting:
		return StateConnecting
	case zkconn.WatchHasSession:
		return StateHasSession
	case zkconn.WatchDisconnected:
		return StateDisconnected
	case zkconn.WatchExpired:
		return StateExpired
	}
	return StateUnknown
}

// sessionEventOfWatch is the SessionEvent a watch session's event is.
func sessionEventOfWatch(ev zkconn.WatchEvent) SessionEvent {
	return SessionEvent{State: stateOfWatch(ev.State), SessionID: ev.SessionID, Server: ev.Server, Time: ev.Time, Watch: true}
}
