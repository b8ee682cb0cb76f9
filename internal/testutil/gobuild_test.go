package testutil

import (
	"slices"
	"strings"
	"testing"
)

// A child go command gets -race exactly when this binary has it: one
// without it compiles the whole dependency tree again on a cold cache; one
// with it where the test had none compiles the race variant for nothing.
func TestGoBuildFlagsNameTheRaceDetectorAsThisBuildHasIt(t *testing.T) {
	flags := GoBuildFlags()
	if got := slices.Contains(flags, "-race"); got != raceBuild {
		t.Errorf("GoBuildFlags() = %q: -race listed = %v, want %v (this test binary's build)", flags, got, raceBuild)
	}
	if got, want := GoFlags("-mod=mod"), strings.Join(append([]string{"-mod=mod"}, flags...), " "); got != want {
		t.Errorf("GoFlags(-mod=mod) = %q, want %q", got, want)
	}
}
