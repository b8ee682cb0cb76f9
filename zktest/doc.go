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
package zktest
