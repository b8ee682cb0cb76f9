package zkwire_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/internal/zkwire"
	"github.com/gracekit/gracekit/zktest"
)

// A Conn counts the zxids of its replies and notifications, and a Dial
// sends the one it is given: a server whose last zxid is lower refuses the
// session (it closes the connection), and one level with it accepts it.
func TestDialSendsTheLastZxidAndABehindServerRefusesIt(t *testing.T) {
	c := zktest.New(t)
	events := make(chan seen, 64)
	conn := dial(t, c, events)
	ctx := context.Background()
	if got := conn.LastZxid(); got != 0 {
		t.Fatalf("a new Conn's LastZxid is %#x, want 0 before any reply", got)
	}
	if _, err := conn.Do(ctx, zkwire.OpAddWatch, zkwire.AddWatchBody("/z", zkwire.ModePersistentRecursive)); err != nil {
		t.Fatal(err)
	}
	w := testutil.ZKConn(t, c.Addrs())
	if _, err := w.Create("/z", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	// The creation's notification comes before any later reply: what the
	// Conn saw of it is counted when it is handed on.
	await(t, events, zkwire.EventNodeCreated, "/z")
	atCreate := conn.LastZxid()
	r, err := conn.Do(ctx, zkwire.OpGetChildren, zkwire.GetChildrenBody("/"))
	if err != nil {
		t.Fatal(err)
	}
	last := conn.LastZxid()
	if r.Header.Zxid <= 0 || last != r.Header.Zxid || last < atCreate {
		t.Fatalf("LastZxid %#x after a reply at %#x (%#x after the creation), want the reply's", last, r.Header.Zxid, atCreate)
	}

	dialAt := func(zxid int64) (*zkwire.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return zkwire.Dial(ctx, zkwire.Config{Addr: c.Servers[0].Addr(), SessionTimeout: 4 * time.Second, LastZxid: zxid})
	}
	level, err := dialAt(last)
	if err != nil {
		t.Fatalf("a Dial at the server's own zxid %#x: %v", last, err)
	}
	if got := level.LastZxid(); got != last {
		t.Fatalf("a Conn dialled at %#x has LastZxid %#x", last, got)
	}
	level.Close()

	ahead := last + 1000
	if refused, err := dialAt(ahead); err == nil {
		refused.Close()
		t.Fatalf("a server at %#x accepted a session that has seen %#x", last, ahead)
	} else if !errors.Is(err, io.EOF) {
		t.Fatalf("a Dial ahead of the server failed with %v, want the server's hang-up (EOF)", err)
	}
}

// A Conn that hears of a deletion, by a notification that carries no zxid,
// and reads nothing after, still learns a zxid at or past it from a ping's
// reply, so that its next handshake is refused by a server behind it.
func TestAPingTellsTheZxidOfADeletionHeardOnlyByItsNotification(t *testing.T) {
	c := zktest.New(t)
	events := make(chan seen, 64)
	conn := dial(t, c, events)
	ctx := context.Background()
	w := testutil.ZKConn(t, c.Addrs())
	if _, err := w.Create("/p", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Do(ctx, zkwire.OpAddWatch, zkwire.AddWatchBody("/p", zkwire.ModePersistentRecursive)); err != nil {
		t.Fatal(err)
	}
	if err := w.Delete("/p", -1); err != nil {
		t.Fatal(err)
	}
	await(t, events, zkwire.EventNodeDeleted, "/p")
	if _, err := w.Create("/unwatched", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	_, st, err := w.Exists("/unwatched")
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "a ping's zxid", func() bool { return conn.LastZxid() >= st.Czxid })
}
