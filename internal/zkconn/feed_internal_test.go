package zkconn

import (
	"testing"

	"github.com/gracekit/gracekit/internal/zkwire"
)

// The listing that a new session sends right behind addWatch may be
// answered before notifications that are routed to the feed ahead of its
// re-read; those must outlive the re-read, which ignores ops, or a node
// created just then is never read (found in review).
func TestANotificationAfterTheListingSentAheadOutlivesTheReRead(t *testing.T) {
	created := zkwire.WatcherEvent{Type: zkwire.EventNodeCreated, Path: "/services/pay/c"}
	for _, tc := range []struct {
		name string
		run  func(f *Feed, conn *zkwire.Conn)
	}{
		{"routed before up", func(f *Feed, conn *zkwire.Conn) {
			f.event(7, created)
			f.up(conn, 1, 0, nil)
		}},
		{"routed between up and the re-read", func(f *Feed, conn *zkwire.Conn) {
			f.up(conn, 1, 0, nil)
			f.event(7, created)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, conn := NewFeed(), &zkwire.Conn{}
			tc.run(f, conn)
			<-f.wake
			w := f.Take()
			if !w.Full || len(w.Ops) != 0 {
				t.Fatalf("first work: full=%v ops=%v, want a re-read with the ops left in the feed", w.Full, w.Ops)
			}
			select {
			case <-f.wake:
			default:
				t.Fatal("the feed was not woken for the ops it kept")
			}
			w = f.Take()
			if w.Full || len(w.Ops) != 1 {
				t.Fatalf("after the re-read: full=%v ops=%v, want the creation of c", w.Full, w.Ops)
			}
			if op, ok := w.Ops["c"]; !ok || op.Del {
				t.Fatalf("ops %v, want c to be read", w.Ops)
			}
		})
	}
	// What was noted on a session that went away is covered by the next
	// session's re-read.
	f := NewFeed()
	f.up(&zkwire.Conn{}, 1, 0, nil)
	f.Take()
	f.event(3, created)
	f.down()
	f.up(&zkwire.Conn{}, 2, 0, nil)
	if w := f.Take(); !w.Full || len(w.Ops) != 0 || len(f.ops) != 0 {
		t.Fatalf("after down and up: full=%v ops=%v kept=%v, want a clean re-read", w.Full, w.Ops, f.ops)
	}
}
