// Package zktls connects the examples' ZooKeeper clients that gracekit does
// not wrap (go-kit's sd/zk, the cached gateway's go-zookeeper session, the
// drivers' own sessions) to a secureClientPort, from the settings gracekit
// reads: fxmodule.Config's ZKTLS* fields, the GRACEKIT_ZK_TLS_* variables
// (docs/CONFIG.md). gracekit's own clients take them through fxmodule or
// ClientOptions.
package zktls
