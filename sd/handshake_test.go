package sd_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
)

// Issue 42: a server that accepts the connection and never answers the
// handshake (a ZooKeeper that is starting, say) is given the session
// timeout shared among the servers, not go-zookeeper's ten receive
// timeouts (6.7 s here, 67 s with the default session timeout): the
// Client tries again meanwhile. A consumer that started during an outage
// otherwise went on serving its snapshot for a minute after ZooKeeper was
// back.
func TestAHandshakeNobodyAnswersIsTriedAgainWithinTheSessionTimeout(t *testing.T) {
	t.Parallel()
	addr := testutil.FrozenServer(t)
	var dials atomic.Int32
	cl, err := sd.NewClient(addr, sd.SessionTimeout(time.Second), sd.ConnectTimeout(time.Hour),
		sd.Dialer(func(network, address string, timeout time.Duration) (net.Conn, error) {
			dials.Add(1)
			return net.DialTimeout(network, address, timeout)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	reg, err := sd.NewRegistrar(cl, instance("frozen", 9999))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4500*time.Millisecond)
	defer cancel()
	if err := reg.RegisterContext(ctx); err == nil {
		t.Fatal("registered against a server that never answers")
	}
	if n := dials.Load(); n < 2 {
		t.Fatalf("%d dial(s) in 4.5 s, want the handshake tried again after about a second", n)
	}
}
