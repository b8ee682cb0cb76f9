package testutil

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CLIPackage is the operators' command, built by BuildCLI.
const CLIPackage = "github.com/gracekit/gracekit/cmd/gracekit"

// CLI is the gracekit command built from this checkout, so that a test
// takes the operator's steps (gracekit drain, gracekit undrain) through
// the binary an operator runs, not through the functions it calls.
type CLI struct{ bin string }

// BuildCLI builds CLIPackage with `go build` ($GO, or go on the PATH)
// into the test's temporary directory. It works from the examples module
// too, which replaces the library with this checkout.
func BuildCLI(tb testing.TB) *CLI {
	tb.Helper()
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		var err error
		if goCmd, err = exec.LookPath("go"); err != nil {
			tb.Fatalf("building the gracekit CLI needs the go command: put it on the PATH or set $GO (%v)", err)
		}
	}
	bin := filepath.Join(tb.TempDir(), "gracekit")
	// The build is bounded by the test's deadline (go test -timeout), not
	// by a guess: on a fresh machine it compiles the library cold, beside
	// every other package's tests.
	ctx := context.Background()
	if d, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline.Add(-5*time.Second))
			defer cancel()
		}
	}
	// With the test's own build flags, so that the CLI reuses its compile.
	args := append([]string{"build"}, GoBuildFlags()...)
	out, err := exec.CommandContext(ctx, goCmd, append(args, "-o", bin, CLIPackage)...).CombinedOutput()
	if err != nil {
		tb.Fatalf("go build %s: %v\n%s", CLIPackage, err, out)
	}
	return &CLI{bin: bin}
}

// Run runs gracekit with args, without the GRACEKIT_* variables of the
// test's environment (give -zk and the rest as flags), and fails the test
// unless it exits 0 within WaitLimit. It returns the standard output.
func (c *CLI) Run(tb testing.TB, args ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = []string{} // nil would be the whole environment
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GRACEKIT_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("gracekit %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}
