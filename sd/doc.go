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
// Instancer implements go-kit's sd.Instancer. A full load reads all nodes
// with a few multiRead requests (ZooKeeper 3.6+) over a short-lived second
// session and publishes at once. It then watches the service in one of two
// modes (WithWatchMode; InstancerStats.WatchMode says which, and one log
// line): by default one persistent recursive watch (ZooKeeper 3.6+
// addWatch) on a read-only watch session of its own, whose notifications it
// applies one node at a time (a creation or a data change reads that node,
// a deletion reads nothing, nothing re-lists the children), dropping the
// session on any disconnect and re-reading the service in bulk over a new
// one; or, on a server that refuses addWatch or when asked, a children
// watch and a data watch per node over the one connection (reads
// pipelined). A Catalog holds one recursive watch on the base path for a
// gateway that routes every service. It publishes the complete set
// of UP instances on every change. It re-arms its watches after every error,
// reconnect and session expiry, keeps the last good set while ZooKeeper is
// unreachable (reporting the error in Event.Err), and skips and counts
// malformed nodes. Evict removes an instance at once, for a gateway's flush
// handler.
//
// The default Codec is CuratorCodec; PlainCodec reads the data-less layout
// /<prefix>/<service>/<host:port>.
//
// An operator drains an instance by writing MetadataDrainedBy and
// OUT_OF_SERVICE into its node (Drain; gracekit drain): its Registrar keeps
// the node OUT_OF_SERVICE, through re-creations after an expiry, until the
// marker is removed (Undrain). The node's ACL decides who may.
package sd
