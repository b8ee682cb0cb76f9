package zkconn

import "strconv"

// HexSession renders a session id as ZooKeeper's server logs, zkCli's stat
// and `gracekit ls` print it: 0x and unsigned hex. The logs say "session"
// in this form so an operator can match a log line to a node's OWNER.
func HexSession(id int64) string {
	return "0x" + strconv.FormatUint(uint64(id), 16)
}
