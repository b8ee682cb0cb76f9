package zktest

import (
	"net"
	"strings"
	"testing"
)

// A restart whose port another socket took while the server was down
// fails at once, saying the server exited, not after the start's whole
// bound with "connection refused" (make stress saw the latter: 30 s).
func TestARestartOnATakenPortFailsAtOnce(t *testing.T) {
	t.Parallel()
	c := New(t)
	if err := c.StopAll(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", c.Servers[0].Addr())
	if err != nil {
		t.Fatalf("take the stopped server's port: %v", err)
	}
	defer l.Close()
	err = c.StartAll()
	if err == nil || !strings.Contains(err.Error(), "exited while starting (exit status") {
		t.Fatalf("StartAll = %v, want the server's exit and how it ended", err)
	}
}

// FreePorts draws below the ephemeral range, where no port-0 listener and
// no outgoing connection's source port can take a stopped server's port.
func TestFreePortsAreBelowTheEphemeralRange(t *testing.T) {
	lo, hi := reservedRange()
	if hi <= lo {
		t.Fatalf("reservedRange() = [%d, %d): no room below this machine's ephemeral range", lo, hi)
	}
	ports, err := FreePorts(50)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		if p < lo || p >= hi {
			t.Errorf("FreePorts gave %d, want it in [%d, %d)", p, lo, hi)
		}
	}
}
