package testutil

import (
	"runtime/debug"
	"strings"
)

// GoBuildFlags returns the flags of this test binary's own build that key
// Go's build cache (-race and -trimpath, as make test sets them), for a
// test that runs go build, go vet or go list itself. With them, the child
// command reuses the compile of every dependency that built the test;
// without them, a cold cache compiled the standard library and the whole
// dependency tree a second (and, with GOFLAGS cleared, a third) time: most
// of make test's CPU on a fresh machine.
func GoBuildFlags() []string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	var flags []string
	for _, s := range bi.Settings {
		if (s.Key == "-race" || s.Key == "-trimpath") && s.Value == "true" {
			flags = append(flags, s.Key)
		}
	}
	return flags
}

// GoFlags is GoBuildFlags as a GOFLAGS value, with extra flags first.
func GoFlags(extra ...string) string {
	return strings.Join(append(extra, GoBuildFlags()...), " ")
}
