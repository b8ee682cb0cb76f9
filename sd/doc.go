// Package sd registers and discovers service instances in ZooKeeper, in the
// node format of Apache Curator's x-discovery as Spring Cloud Zookeeper
// writes it, so Go, Java and Node services see each other.
//
// A Client is one ZooKeeper session (ensemble, chroot, digest auth, ACLs)
// shared by any number of Registrars and Instancers.
//
// Registrar implements go-kit's sd.Registrar. It keeps one EPHEMERAL node
// /<basePath>/<service>/<id> alive: after a session expiry it re-creates the
// node in the new session, reading ephemeralOwner first so it never deletes
// another session's node. SetStatus flips metadata.instance_status between
// UP and OUT_OF_SERVICE with a version-checked write; DeregisterContext
// deletes exactly its own node.
//
// Instancer implements go-kit's sd.Instancer. It watches the service's
// children and every child's data. A full load reads all nodes with a few
// multiRead requests (ZooKeeper 3.6+) over a short-lived second session and
// publishes at once, then arms a watch per node over the one connection
// (reads pipelined); later it reads only what changed. It publishes the complete set
// of UP instances on every change. It re-arms its watches after every error,
// reconnect and session expiry, keeps the last good set while ZooKeeper is
// unreachable (reporting the error in Event.Err), and skips and counts
// malformed nodes. Evict removes an instance at once, for a gateway's flush
// handler.
//
// The default Codec is CuratorCodec; PlainCodec reads the data-less layout
// /<prefix>/<service>/<host:port>.
package sd
