package testutil

import (
	"bufio"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracekit/gracekit/zktest"
)

// listInstances is the client's Java source, run by java's source-file
// mode. Embedded rather than found beside this file: under go test
// -trimpath (make test's, so that a fresh clone reuses the build cache)
// runtime.Caller names no path on disk.
//
//go:embed curator/ListInstances.java
var listInstances []byte

// debianNetty is what ZooKeeper's Netty client socket needs beside Debian's
// zookeeper.jar (see zktest's TLS).
var debianNetty = []string{"/usr/share/java/netty-codec.jar", "/usr/share/java/netty-resolver.jar"}

// curatorJar is Debian's Curator x-discovery jar; its manifest's
// Class-Path names the rest of Curator, Jackson and Guava.
const curatorJar = "/usr/share/java/curator-x-discovery.jar"

// Curator is a stock Apache Curator x-discovery client (Debian's 5.4.0,
// configured as Spring Cloud Zookeeper configures it; see
// curator/ListInstances.java) connected to an ensemble, in a process of
// its own that lives as long as the test.
type Curator struct {
	mu  sync.Mutex
	in  io.WriteCloser
	out *bufio.Scanner
	cmd *exec.Cmd
}

// NewCurator starts the client against connect, with jvmProps (such as
// -Dzookeeper.client.secure=true) before its class. It fails the test,
// with the install command, when Curator or Java is missing.
func NewCurator(tb testing.TB, connect string, jvmProps ...string) *Curator {
	tb.Helper()
	java, zkcp, err := zktest.Runtime()
	if err != nil {
		tb.Fatalf("%v: run `make zookeeper` (scripts/install-zookeeper.sh)", err)
	}
	cp := os.Getenv("CURATOR_CLASSPATH")
	if cp == "" {
		if _, err := os.Stat(curatorJar); err != nil {
			tb.Fatalf("Apache Curator is not installed (%v): run `make zookeeper` (scripts/install-zookeeper.sh --curator installs Debian's libcurator-discovery-java), or set CURATOR_CLASSPATH to curator-x-discovery 5 and its jars", err)
		}
		cp = curatorJar
	}
	src := filepath.Join(tb.TempDir(), "ListInstances.java")
	if err := os.WriteFile(src, listInstances, 0o600); err != nil {
		tb.Fatal(err)
	}
	cp += string(os.PathListSeparator) + zkcp
	for _, jar := range debianNetty { // the Netty client socket (TLS) needs them; Debian's manifest leaves them out
		if _, err := os.Stat(jar); err == nil {
			cp += string(os.PathListSeparator) + jar
		}
	}
	args := append(append([]string{"-XX:TieredStopAtLevel=1"}, jvmProps...), "-cp", cp, src, connect)
	c := &Curator{cmd: exec.Command(java, args...)}
	c.cmd.Stderr = io.Discard // SLF4J's "no binding" notice
	if c.in, err = c.cmd.StdinPipe(); err != nil {
		tb.Fatal(err)
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	c.out = bufio.NewScanner(out)
	if err := c.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		c.in.Close() // the client exits at the end of its input
		done := make(chan struct{})
		go func() { _ = c.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-done
		}
	})
	return c
}

// List lists service under basePath with ServiceDiscovery.queryForInstances:
// one "id address port sslPort status" line per instance (sslPort "null"
// when unset), or the query's error.
func (c *Curator) List(tb testing.TB, basePath, service string) ([]string, error) {
	tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := fmt.Fprintf(c.in, "%s %s\n", basePath, service); err != nil {
		tb.Fatalf("Curator client: %v", err)
	}
	var lines []string
	for c.out.Scan() {
		line := c.out.Text()
		switch {
		case line == "END":
			if len(lines) == 1 && strings.HasPrefix(lines[0], "ERROR ") {
				return nil, errors.New(strings.TrimPrefix(lines[0], "ERROR "))
			}
			return lines, nil
		default:
			lines = append(lines, line)
		}
	}
	tb.Fatalf("Curator client ended (%v) after %q", c.out.Err(), lines)
	return nil, nil
}
