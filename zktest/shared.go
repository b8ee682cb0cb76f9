package zktest

import (
	"fmt"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
)

// TestingM is what a TestMain runs: *testing.M, or a wrapper such as the
// one SharedMain returns. goleak.VerifyTestMain accepts it.
type TestingM interface{ Run() int }

// shared is the one server of a test binary, started by the first Shared.
var shared struct {
	mu      sync.Mutex
	enabled bool     // SharedMain is running the tests
	opts    []Option // for the server SharedMain will start on first use
	c       *Cluster
	dir     string
	err     error // a failed start, reported to every later Shared
}

type sharedMain struct {
	m    TestingM
	opts []Option
}

// SharedMain wraps a TestMain's m so that Shared may be used in the
// binary's tests: Run runs them, then stops the shared server (if a test
// started it) and removes its data. opts configure that server. Compose it
// with goleak, so the leak check runs after the server is gone:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(zktest.SharedMain(m)) }
func SharedMain(m TestingM, opts ...Option) TestingM {
	return sharedMain{m: m, opts: opts}
}

func (s sharedMain) Run() int {
	shared.mu.Lock()
	shared.enabled, shared.opts = true, s.opts
	shared.mu.Unlock()
	defer stopShared()
	return s.m.Run()
}

func stopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.c != nil {
		_ = shared.c.Close()
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	shared.c, shared.dir, shared.err, shared.enabled = nil, "", nil, false
}

// Shared returns the test binary's shared standalone server, starting it
// on first use; it stays up until SharedMain's Run ends. One JVM for the
// whole binary instead of one per test: a test on it must keep to nodes of
// its own (UniquePath) and leave the server alone (see the package doc).
// Like New, it fails the test with the install command when ZooKeeper is
// not installed, and skips only under -short. It fails when the binary's
// TestMain does not run SharedMain, which is what stops the server.
func Shared(tb testing.TB) *Cluster {
	tb.Helper()
	if _, _, err := Runtime(); err != nil {
		if testing.Short() {
			tb.Skip("zktest: ZooKeeper tests need a server; skipped in -short mode")
		}
		tb.Fatal(err)
	}
	c, err := sharedCluster()
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func sharedCluster() (*Cluster, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.enabled {
		return nil, fmt.Errorf("zktest: Shared needs the test binary's TestMain to run zktest.SharedMain(m), " +
			"which stops the server after the tests: func TestMain(m *testing.M) { goleak.VerifyTestMain(zktest.SharedMain(m)) }")
	}
	if shared.c != nil || shared.err != nil {
		return shared.c, shared.err
	}
	dir, err := os.MkdirTemp("", "zktest-shared-")
	if err != nil {
		shared.err = fmt.Errorf("zktest: shared server: %w", err)
		return nil, shared.err
	}
	shared.dir = dir
	if shared.c, err = Start(dir, shared.opts...); err != nil {
		shared.err = fmt.Errorf("zktest: shared server: %w", err)
	}
	return shared.c, shared.err
}

var uniqueSeq atomic.Int64

// notNodeName is what UniquePath replaces in a test's name: ZooKeeper
// takes more, but a plain name reads well in logs and in zkCli.
var notNodeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// UniquePath is an absolute ZooKeeper path no other test of the binary
// gets, named after the test (e.g. /TestJoin_sub-7), for a test on the
// shared server to use as its base path: parallel tests then never see
// each other's nodes.
func UniquePath(tb testing.TB) string {
	name := notNodeName.ReplaceAllString(tb.Name(), "_")
	return fmt.Sprintf("/%s-%d", name, uniqueSeq.Add(1))
}
