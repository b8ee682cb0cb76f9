package zkwire_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/internal/zkwire"
	"github.com/gracekit/gracekit/zktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type seen struct {
	seq uint64
	ev  zkwire.WatcherEvent
}

func dial(t *testing.T, c *zktest.Cluster, events chan<- seen, auth ...zkwire.Auth) *zkwire.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := zkwire.Dial(ctx, zkwire.Config{
		Addr: c.Servers[0].Addr(), SessionTimeout: 4 * time.Second, Auth: auth,
		OnEvent: func(seq uint64, ev zkwire.WatcherEvent) {
			select {
			case events <- seen{seq, ev}:
			default:
				t.Error("event channel full")
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

func await(t *testing.T, events <-chan seen, typ int32, p string) seen {
	t.Helper()
	deadline := time.After(testutil.WaitLimit)
	for {
		select {
		case s := <-events:
			if s.ev.Type == typ && s.ev.Path == p {
				return s
			}
			t.Logf("skipped %+v", s)
		case <-deadline:
			t.Fatalf("no event %d on %s", typ, p)
		}
	}
}

// A persistent recursive watch reports creations, data changes and
// deletions below it, each once, in the stream's order; reads and
// multiReads over the same Conn answer in between.
func TestRecursiveWatchReportsChangesBelowIt(t *testing.T) {
	c := zktest.New(t)
	events := make(chan seen, 64)
	conn := dial(t, c, events)
	ctx := context.Background()
	if _, err := conn.Do(ctx, zkwire.OpAddWatch, zkwire.AddWatchBody("/svc", zkwire.ModePersistentRecursive)); err != nil {
		t.Fatal(err)
	}
	w := testutil.ZKConn(t, c.Addrs())
	acl := zk.WorldACL(zk.PermAll)
	if _, err := w.Create("/svc", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create("/svc/a", []byte("one"), 0, acl); err != nil {
		t.Fatal(err)
	}
	created := await(t, events, zkwire.EventNodeCreated, "/svc/a")
	if _, err := w.Set("/svc/a", []byte("two"), -1); err != nil {
		t.Fatal(err)
	}
	changed := await(t, events, zkwire.EventNodeDataChanged, "/svc/a")
	if changed.seq <= created.seq {
		t.Fatalf("seq %d then %d", created.seq, changed.seq)
	}
	r, err := conn.Do(ctx, zkwire.OpGetData, zkwire.GetDataBody("/svc/a"))
	if err != nil {
		t.Fatal(err)
	}
	data, st, err := zkwire.ParseGetData(r.Body)
	if err != nil || string(data) != "two" || st.Version != 1 || r.Seq <= changed.seq {
		t.Fatalf("getData: %q %+v seq %d, %v", data, st, r.Seq, err)
	}
	r, err = conn.Do(ctx, zkwire.OpGetChildren, zkwire.GetChildrenBody("/svc"))
	if err != nil {
		t.Fatal(err)
	}
	if names, err := zkwire.ParseChildren(r.Body); err != nil || len(names) != 1 || names[0] != "a" {
		t.Fatalf("children %v, %v", names, err)
	}
	r, err = conn.Do(ctx, zkwire.OpMultiRead, zkwire.MultiGetDataBody("/svc", []string{"a", "none"}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := zkwire.ParseMultiGetData(r.Body)
	if err != nil || len(res) != 2 || string(res[0].Data) != "two" || res[1].Err != zkwire.CodeNoNode {
		t.Fatalf("multiRead %+v, %v", res, err)
	}
	if _, err := conn.Do(ctx, zkwire.OpGetData, zkwire.GetDataBody("/svc/none")); !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("getData of a missing node: %v", err)
	}
	if err := w.Delete("/svc/a", -1); err != nil {
		t.Fatal(err)
	}
	await(t, events, zkwire.EventNodeDeleted, "/svc/a")

	// A node the session may not read: is its creation reported?
	if err := w.AddAuth("digest", []byte("o:pw")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create("/svc/hidden", nil, 0, zk.DigestACL(zk.PermAll, "o", "pw")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create("/svc/b", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	await(t, events, zkwire.EventNodeCreated, "/svc/b")
	for len(events) > 0 {
		s := <-events
		t.Logf("event %+v", s)
	}
}

// Requests sent back to back with Send are answered in the order sent and
// each reply reaches its own Call, whatever order they are waited in. A
// Call given up on leaves the Conn usable; on a closed Conn it fails.
func TestSendPipelinesRequestsInOrder(t *testing.T) {
	c := zktest.New(t)
	w := testutil.ZKConn(t, c.Addrs())
	acl := zk.WorldACL(zk.PermAll)
	for _, p := range []string{"/p", "/p/a"} {
		if _, err := w.Create(p, []byte(p), 0, acl); err != nil {
			t.Fatal(err)
		}
	}
	conn := dial(t, c, make(chan seen, 64))
	ctx := context.Background()
	calls := []*zkwire.Call{
		conn.Send(zkwire.OpAddWatch, zkwire.AddWatchBody("/p", zkwire.ModePersistentRecursive)),
		conn.Send(zkwire.OpGetChildren, zkwire.GetChildrenBody("/p")),
		conn.Send(zkwire.OpGetData, zkwire.GetDataBody("/p/a")),
		conn.Send(zkwire.OpGetData, zkwire.GetDataBody("/p/none")),
	}
	seqs := make([]uint64, len(calls))
	r, err := calls[3].Wait(ctx)
	if !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("getData of a missing node: %v", err)
	}
	seqs[3] = r.Seq
	if r, err = calls[2].Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if data, _, err := zkwire.ParseGetData(r.Body); err != nil || string(data) != "/p/a" {
		t.Fatalf("getData: %q, %v", data, err)
	}
	seqs[2] = r.Seq
	if r, err = calls[1].Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if names, err := zkwire.ParseChildren(r.Body); err != nil || len(names) != 1 || names[0] != "a" {
		t.Fatalf("children %v, %v", names, err)
	}
	seqs[1] = r.Seq
	if r, err = calls[0].Wait(ctx); err != nil {
		t.Fatal(err)
	}
	seqs[0] = r.Seq
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("replies at stream positions %v, want the order sent", seqs)
		}
	}

	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := conn.Send(zkwire.OpGetData, zkwire.GetDataBody("/p/a")).Wait(gone); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled ctx: %v", err)
	}
	if _, err := conn.Do(ctx, zkwire.OpGetData, zkwire.GetDataBody("/p/a")); err != nil {
		t.Fatalf("after a Call given up on: %v", err)
	}
	conn.Close()
	if _, err := conn.Send(zkwire.OpGetData, zkwire.GetDataBody("/p/a")).Wait(ctx); !errors.Is(err, zkwire.ErrClosed) {
		t.Fatalf("Send on a closed Conn: %v", err)
	}
}

// A released reply's frame takes a later large reply, whose bytes are its
// own: reading a node of 64 KiB twice, releasing the first, gives the same
// bytes both times, and a reply never released stays intact.
func TestAReleasedFrameIsReusedWithoutMixingReplies(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	w := testutil.ZKConn(t, c.Addrs())
	big := func(b byte) []byte { return bytes.Repeat([]byte{b}, 64<<10) }
	for p, b := range map[string]byte{"/r1": 'a', "/r2": 'b'} {
		if _, err := w.Create(p, big(b), 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	conn := dial(t, c, make(chan seen, 64))
	ctx := context.Background()
	kept, err := conn.Do(ctx, zkwire.OpGetData, zkwire.GetDataBody("/r1"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		p, want := "/r1", big('a')
		if i%2 == 1 {
			p, want = "/r2", big('b')
		}
		r, err := conn.Do(ctx, zkwire.OpGetData, zkwire.GetDataBody(p))
		if err != nil {
			t.Fatal(err)
		}
		data, _, err := zkwire.ParseGetData(r.Body)
		if err != nil || !bytes.Equal(data, want) {
			t.Fatalf("read %d of %s: %d bytes, %v; want its own %d", i, p, len(data), err, len(want))
		}
		r.Release()
		if r.Body != nil {
			t.Fatal("a released reply keeps its body")
		}
	}
	if data, _, err := zkwire.ParseGetData(kept.Body); err != nil || !bytes.Equal(data, big('a')) {
		t.Fatalf("a reply never released was overwritten: %v", err)
	}
}
