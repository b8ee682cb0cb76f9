package failpoint_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/gracekit/gracekit/internal/failpoint"
	"github.com/gracekit/gracekit/internal/testutil"
)

// An untagged build compiles every Inject to nothing: Enabled is false,
// and the compiler inlines the empty function (so a call site costs no
// call at all).
func TestUntaggedBuildHasNoFailpoints(t *testing.T) {
	if !failpoint.Enabled { // this binary is untagged: its own Inject is the empty one
		failpoint.Inject(failpoint.StopAfterFlush) // must not block or panic
	}
	// The child build has no tags whatever this binary's are.
	args := append([]string{"build"}, testutil.GoBuildFlags()...) // reuses this test's compile of the rest
	out, err := exec.Command("go", append(args, "-gcflags=-m", ".")...).CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "can inline Inject") {
		t.Fatalf("the untagged Inject is not inlinable; the compiler said:\n%s", out)
	}
}

// The tagged build compiles: the chaos suite builds with it. make lint
// vets it (go vet -tags): here, that vetted the whole standard library
// again under the tag, 12 s of CPU of a cold make test.
func TestTaggedBuildCompiles(t *testing.T) {
	args := append([]string{"build"}, testutil.GoBuildFlags()...)
	out, err := exec.Command("go", append(args, "-tags", "gracekit_failpoints", ".")...).CombinedOutput()
	if err != nil {
		t.Fatalf("go build -tags gracekit_failpoints: %v\n%s", err, out)
	}
}
