package zktest

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A start whose client port another server took before the JVM bound it
// is not serving, though that port answers: WaitServing asks who answers.
// (Parallel tests each reserve ports with FreePorts; one was handed out
// again between the reservation and the bind, and a test wrote into
// another test's server: "node already exists".)
func TestAServerOnAnotherStartsPortIsNotTakenForIt(t *testing.T) {
	t.Parallel()
	other := New(t)
	ours := &Server{ID: 1, ClientPort: other.Servers[0].ClientPort, dir: t.TempDir(), cmd: &exec.Cmd{}}
	c := &Cluster{Servers: []*Server{ours}}
	err := c.WaitServing(500 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "answers for another server") {
		t.Fatalf("WaitServing = %v, want the port named as another server's", err)
	}
	if err := other.WaitServing(5 * time.Second); err != nil {
		t.Fatalf("the server on its own port: %v", err)
	}
}
