package testutil

import (
	"runtime/debug"
	"strings"
)

// GoBuildFlags returns the flags of this test binary's own build that a
// go command the test runs (go build, go vet) should share: -race and
// -trimpath, which key Go's build cache, and -ldflags (make test's -w). With
// the first two, the child reuses the compile of every dependency that
// built the test; without them, a cold cache compiled the standard library
// and the whole dependency tree a second (and, with GOFLAGS cleared, a
// third) time: most of make test's CPU on a fresh machine. -w leaves out
// the debug info, about half of each link's CPU.
func GoBuildFlags() []string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	var flags []string
	for _, s := range bi.Settings {
		switch {
		case (s.Key == "-race" || s.Key == "-trimpath") && s.Value == "true":
			flags = append(flags, s.Key)
		case s.Key == "-ldflags" && s.Value != "" && !strings.ContainsAny(s.Value, " \t'\""):
			// One word only: GoFlags puts it in GOFLAGS, which splits at spaces.
			flags = append(flags, "-ldflags="+s.Value)
		}
	}
	return flags
}

// GoFlags is GoBuildFlags as a GOFLAGS value, with extra flags first.
func GoFlags(extra ...string) string {
	return strings.Join(append(extra, GoBuildFlags()...), " ")
}
