package sd

// HadSession tells whether a server of the ensemble ever gave one of the
// Client's sessions a session: false while no server answered since
// NewClient. A role that may go on without ZooKeeper (a provider that
// registers once it answers) tells an unreachable ensemble from a slow
// call by it.
func (c *Client) HadSession() bool { return c.hadSession() }
