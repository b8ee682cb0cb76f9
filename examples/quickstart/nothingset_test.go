package quickstart_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Issue 39, item 5: the first wrong move, said once. Each fx quickstart,
// run with nothing set, exits 1 with one short line that names every
// variable to set, a local try and docs/CONFIG.md: not fx's wrapping of
// it three times with a stack trace.
func TestAQuickstartRunWithNothingSetSaysSoOnce(t *testing.T) {
	bins := readmeBinaries(t) // the README's programs, which are these quickstarts
	tests := []struct {
		give string
		want []string // the variables named
	}{
		{give: "provider", want: []string{"GRACEKIT_ZK_SERVERS", "GRACEKIT_SERVICE", "GRACEKIT_ADDRESS", "GRACEKIT_PORT"}},
		{give: "gateway", want: []string{"GRACEKIT_ZK_SERVERS", "GRACEKIT_SERVICE", "GRACEKIT_ADDRESS", "GRACEKIT_FLUSH_SECRET"}},
		{give: "grpc", want: []string{"GRACEKIT_ZK_SERVERS", "GRACEKIT_SERVICE", "GRACEKIT_ADDRESS", "GRACEKIT_GRPC_PORT"}},
	}
	for _, tt := range tests {
		t.Run("the "+tt.give+" quickstart", func(t *testing.T) {
			cmd := exec.Command(bins[tt.give])
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
			b, err := cmd.CombinedOutput()
			out := string(b)
			if code := cmd.ProcessState.ExitCode(); code != 1 {
				t.Fatalf("exit %d (%v), want 1; output:\n%s", code, err, out)
			}
			if n := strings.Count(out, "required settings unset"); n != 1 {
				t.Errorf("the message appears %d times, want once:\n%s", n, out)
			}
			if !strings.HasPrefix(out, tt.give+": fxmodule: required settings unset: "+strings.Join(tt.want, ", ")+" (Config.") {
				t.Errorf("output %q: want it to start with the variables to set, in one line", out)
			}
			if !strings.Contains(out, "docs/CONFIG.md") {
				t.Errorf("output %q does not point to docs/CONFIG.md", out)
			}
			if len(out) > 400 || strings.Count(out, "\n") != 1 {
				t.Errorf("output is %d characters in %d lines, want one line under 400:\n%s", len(out), strings.Count(out, "\n"), out)
			}
			for _, s := range []string{"goroutine ", ".go:", "stack", "[Fx]", "fxevent", "received non-nil error"} {
				if strings.Contains(out, s) {
					t.Errorf("output has %q (a stack trace or fx's wrapping):\n%s", s, out)
				}
			}
		})
	}
}
