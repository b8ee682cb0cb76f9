package main

import (
	"os"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/zktest"
)

// benchServer starts a ZooKeeper server at full speed (JIT fully on,
// unlike the tests' quick-start default) under a directory of its own, and
// a plain connection that writes the nodes a suite needs. done stops both
// and removes the directory.
func benchServer() (cluster *zktest.Cluster, writer *zk.Conn, done func(), err error) {
	dir, err := os.MkdirTemp("", "gracekit-bench-")
	if err != nil {
		return nil, nil, nil, err
	}
	cluster, err = zktest.Start(dir, append(serverOptions, zktest.JVMArgs("-Xmx1g"))...)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	writer, _, err = zk.Connect(cluster.Addrs(), 30*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		cluster.Close()
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	return cluster, writer, func() {
		writer.Close()
		cluster.Close()
		os.RemoveAll(dir)
	}, nil
}
