// Package sd registers and discovers service instances in ZooKeeper, in the
// node format of Apache Curator's x-discovery as Spring Cloud Zookeeper
// writes it, so Go, Java and Node services see each other.
//
// A Client is a connection to one ensemble (chroot, digest auth, ACLs)
// shared by any number of Registrars, Instancers and Catalogs. It holds at
// most two ZooKeeper sessions, whatever the number of services: its own
// (registrations and their ephemeral nodes, the per-node watches) and one
// read-only watch session that every Instancer and Catalog of the Client
// shares, with one persistent recursive watch per watched service. A
// process that only registers holds one session; one that only watches,
// one. Both sessions open when first needed, try the servers in one order
// shuffled per Client, and move to the next server when theirs is lost:
//
//	session  state        entered when                           then
//	both     not opened   NewClient (it dials nothing)           own: the first call that needs it opens it;
//	                                                             watch: the first Instancer or Catalog
//	both     connecting   opened, or its connection was lost     calls wait (while no server ever answered:
//	                                                             the connect timeout, then zk.ErrNoServer)
//	own      has session  a server gave it                       calls go
//	watch    up           a server gave it, watches added        notifications routed to each service's feed
//	both     resumed      reconnected within the session timeout same session; the watch session re-adds its
//	                                                             watches and re-reads every service in bulk
//	both     expired      the server ended it                    a new session at once; Registrars re-create
//	                                                             their nodes, Instancers re-read
//	both     lost         no server took it for its timeout,     expired, by the Client: a new session from
//	                      and one that runs is behind it (an     zxid 0 that syncs before its first read
//	                      ensemble restored from a backup)       (docs/ROBUSTNESS.md)
//	watch    closed       its last Instancer or Catalog stopped  the next one opens it again
//	both     closed       Client.Close                           calls and running Instancers end: ErrClosed
//
// Registrar implements go-kit's sd.Registrar. It keeps one EPHEMERAL node
// /<basePath>/<service>/<id> alive: after a session expiry it re-creates the
// node in the new session, reading ephemeralOwner first so it never deletes
// another session's node. SetStatus flips metadata.instance_status between
// UP and OUT_OF_SERVICE with a version-checked write; DeregisterContext
// deletes exactly its own node.
//
// Instancer implements go-kit's sd.Instancer. A full load reads all nodes
// with a few multiRead requests (ZooKeeper 3.6+) and publishes at once. It
// then watches the service in one of two modes (WithWatchMode;
// InstancerStats.WatchMode says which, and one log line): by default one
// persistent recursive watch (ZooKeeper 3.6+ addWatch) added on the
// Client's watch session, whose notifications it applies one node at a
// time (a creation or a data change reads that node, a deletion reads
// nothing, nothing re-lists the children), re-reading the service in bulk
// after any disconnect; or, on a server that refuses addWatch or when
// asked, a children watch and a data watch per node over the Client's own
// session (reads pipelined, the first load over a short-lived bulk
// session). A Catalog holds one recursive watch on the base path for a
// gateway that routes every service; it covers the watches of the
// services under it. It publishes the complete set
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
// MetadataOutBy ("out_by") records what else took it out: SetStatusBy
// writes out_by=health with the health check's OUT_OF_SERVICE, in the same
// setData, and removes it with UP. It is only a record: the Registrar holds
// a node out for MetadataDrainedBy, never for MetadataOutBy.
// OutOfServiceBy reads both (the operator wins).
package sd
