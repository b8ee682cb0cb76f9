package testutil

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gracekit/gracekit/zktest"
)

// curatorJar is Debian's Curator x-discovery jar; its manifest's
// Class-Path names the rest of Curator, Jackson and Guava.
const curatorJar = "/usr/share/java/curator-x-discovery.jar"

// CuratorList lists service under basePath with a stock Apache Curator
// x-discovery client (Debian's 5.4.0, configured as Spring Cloud
// Zookeeper configures it; see curator/ListInstances.java): one
// "id address port sslPort status" line (sslPort "null" when unset) per instance, or the error of
// ServiceDiscovery.queryForInstances. It fails the test, with the install
// command, when Curator or Java is missing.
func CuratorList(tb testing.TB, connect, basePath, service string) ([]string, error) {
	tb.Helper()
	java, zkcp, err := zktest.Runtime()
	if err != nil {
		tb.Fatalf("%v: run `make zookeeper` (scripts/install-zookeeper.sh)", err)
	}
	cp := os.Getenv("CURATOR_CLASSPATH")
	if cp == "" {
		if _, err := os.Stat(curatorJar); err != nil {
			tb.Fatalf("Apache Curator is not installed (%v): run `make zookeeper` (scripts/install-zookeeper.sh installs Debian's libcurator-discovery-java), or set CURATOR_CLASSPATH to curator-x-discovery 5 and its jars", err)
		}
		cp = curatorJar
	}
	_, file, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(file), "curator", "ListInstances.java")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, java, "-Xshare:auto", "-XX:TieredStopAtLevel=1",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-cp", cp+string(os.PathListSeparator)+zkcp, src, connect, basePath, service)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var lines []string
	if s := strings.TrimSpace(string(out)); s != "" {
		lines = strings.Split(s, "\n")
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() == 3 && len(lines) > 0 && strings.HasPrefix(lines[0], "ERROR "):
		return nil, errors.New(strings.TrimPrefix(strings.Join(lines, " "), "ERROR "))
	case err != nil:
		tb.Fatalf("Curator client: %v\nstdout: %s\nstderr: %s", err, out, stderr.String())
	}
	return lines, nil
}
