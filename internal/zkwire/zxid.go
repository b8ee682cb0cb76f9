//go:build !gracekit_mutant_nozxid

package zkwire

// zxidToSend is the lastZxidSeen a Dial puts in its handshake, given the
// highest zxid the session's owner has seen (Config.LastZxid): that one,
// so that a server behind it refuses the session. This is the one place
// that chooses it; the planted-bug build (tag gracekit_mutant_nozxid)
// defines its own, which sends 0 as gracekit did before.
func zxidToSend(seen int64) int64 { return seen }
