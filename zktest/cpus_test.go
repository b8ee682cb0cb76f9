package zktest

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestCPUsRefusesAListTasksetCannotRead(t *testing.T) {
	for _, give := range []string{"", "a", "0,", "-1", "0 1"} {
		if _, err := Start(t.TempDir(), CPUs(give)); err == nil || !strings.Contains(err.Error(), "invalid CPU list") {
			t.Errorf("CPUs(%q): err = %v, want an invalid CPU list error", give, err)
		}
	}
}

func TestCPUsPinsTheServersJVM(t *testing.T) {
	c := New(t, CPUs("0"))
	s := c.Servers[0]
	s.mu.Lock()
	pid := s.cmd.Process.Pid
	s.mu.Unlock()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			got = strings.TrimSpace(v)
		}
	}
	if got != "0" {
		t.Fatalf("the JVM (pid %d) may run on CPUs %q, want 0", pid, got)
	}
}
