package zkwire

// zxidToSend is the lastZxidSeen a Dial puts in its handshake, given the
// highest zxid the session's owner has seen (Config.LastZxid): that one,
// so that a server behind it refuses the session. This is the one place
// that chooses it.
func zxidToSend(seen int64) int64 { return seen }
