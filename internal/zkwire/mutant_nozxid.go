//go:build gracekit_mutant_nozxid

package zkwire

// zxidToSend plants a bug for the chaos suite's mutation mode: every
// handshake sends lastZxidSeen 0, as gracekit did before, so a server
// behind the session accepts it.
func zxidToSend(int64) int64 { return 0 }
