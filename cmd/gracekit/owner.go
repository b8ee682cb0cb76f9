package main

import (
	"fmt"

	"github.com/go-zookeeper/zk"
)

// A znode's ephemeralOwner is not always a session. ZooKeeper 3.5+ reuses
// the field: a CONTAINER node holds 0x8000000000000000 and a TTL node
// 0xFF00000000000000 with its TTL in the low bits (EphemeralType.java),
// while a persistent node holds 0. So "ephemeralOwner != 0" does not mean
// "owned by a session": a TTL or container node would pass for one.

// Kinds of owner a node can have.
const (
	ownerSession    = "session"    // an ephemeral node: it goes with its session
	ownerPersistent = "persistent" // no owner: it stays when its process dies
	ownerContainer  = "container"  // a CONTAINER node: removed once empty, not with a session
	ownerTTL        = "ttl"        // a TTL node: removed after its TTL unless modified
)

const (
	containerOwner = int64(-1 << 63)          // 0x8000000000000000
	ttlMask        = int64(-1) &^ (1<<56 - 1) // the top byte
	ttlOwner       = ttlMask                  // 0xFF in the top byte
)

// ownerKind names what a node's ephemeralOwner means.
func ownerKind(st *zk.Stat) string {
	switch o := st.EphemeralOwner; {
	case o == 0:
		return ownerPersistent
	case o == containerOwner:
		return ownerContainer
	case o&ttlMask == ttlOwner:
		return ownerTTL
	}
	return ownerSession
}

// ownerHex is the owner session as zkCli and the server logs print it,
// "" when the node has none.
func ownerHex(st *zk.Stat) string {
	if ownerKind(st) != ownerSession {
		return ""
	}
	return fmt.Sprintf("0x%x", uint64(st.EphemeralOwner))
}
