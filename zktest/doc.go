// Package zktest starts real ZooKeeper servers for tests, in the spirit of
// net/http/httptest: a standalone server or an N-member ensemble on free
// loopback ports, each with its data in a directory of its own, stopped
// when the test ends.
//
// It runs the ZooKeeper that is installed on the machine: $ZOOKEEPER_CLASSPATH,
// the jars of $ZOOKEEPER_HOME, or Debian's zookeeper package. When none is
// there, New fails the test with the install command (see InstallHint); it
// skips only under -short.
//
// Fault controls: Stop, Kill and Restart a member, StopAll and StartAll, find
// the Leader, expire a client's session on purpose through a
// SessionRecorder, cut one client off the ensemble with a Partition, and
// start a server behind the others from a copy of a member's data
// (Cluster.CopyOf).
//
// Secured servers: TLS(pki) serves a TLS port beside the plaintext one
// (Server.SecureAddr, Cluster.SecureConnectString) with a CA and
// certificates NewPKI makes in the test, and client auth required;
// SASL(users) requires every session to authenticate with SASL
// DIGEST-MD5 as one of users.
//
// # One server per test binary
//
// Starting a JVM costs a second or more of CPU, which is most of what a
// short test spends. Shared returns one standalone server for the whole
// test binary, started on first use and stopped by SharedMain after the
// run:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(zktest.SharedMain(m)) }
//
//	func TestJoin(t *testing.T) {
//		t.Parallel()
//		zkc := zktest.Shared(t)
//		base := zktest.UniquePath(t) // e.g. sd.BasePath(base)
//		...
//	}
//
// Tests on the shared server run beside each other, so each keeps to nodes
// of its own: a base path from UniquePath, or service names no other test
// uses. A test must take a server of its own from New when it
//   - stops, restarts or kills the server, or cuts its clients off with a
//     Partition or an Isolate (every other test would see the outage);
//   - expires sessions from the server's side (SessionRecorder.Expire);
//   - counts server-wide things: Sessions, Ephemerals, watches, connections,
//     or the children of a path it does not own;
//   - needs the server configured otherwise: MaxClientConnections,
//     TickTime, ContainerCheck, Size, JVM properties (SharedMain's options
//     configure the shared server for the whole binary);
//   - relies on the default base path /services being empty.
//
// The JVMs map ZooKeeper's classes from an AppCDS archive in the user's
// cache directory (gracekit/zktest), which the first JVM to find none
// dumps at its Close: a start then costs a third less CPU. Set
// GRACEKIT_ZKTEST_CDS=off to start without it.
package zktest
