package sd

import (
	"slices"
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
		run  func(f *recFeed, conn *zkwire.Conn)
	}{
		{"routed before up", func(f *recFeed, conn *zkwire.Conn) {
			f.event(7, created)
			f.up(conn, 1, 0, nil)
		}},
		{"routed between up and the re-read", func(f *recFeed, conn *zkwire.Conn) {
			f.up(conn, 1, 0, nil)
			f.event(7, created)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, conn := newRecFeed(), &zkwire.Conn{}
			tc.run(f, conn)
			<-f.wake
			w := f.take()
			if !w.full || len(w.ops) != 0 {
				t.Fatalf("first work: full=%v ops=%v, want a re-read with the ops left in the feed", w.full, w.ops)
			}
			select {
			case <-f.wake:
			default:
				t.Fatal("the feed was not woken for the ops it kept")
			}
			w = f.take()
			if w.full || len(w.ops) != 1 {
				t.Fatalf("after the re-read: full=%v ops=%v, want the creation of c", w.full, w.ops)
			}
			if op, ok := w.ops["c"]; !ok || op.del {
				t.Fatalf("ops %v, want c to be read", w.ops)
			}
		})
	}
	// What was noted on a session that went away is covered by the next
	// session's re-read.
	f := newRecFeed()
	f.up(&zkwire.Conn{}, 1, 0, nil)
	f.take()
	f.event(3, created)
	f.down()
	f.up(&zkwire.Conn{}, 2, 0, nil)
	if w := f.take(); !w.full || len(w.ops) != 0 || len(f.ops) != 0 {
		t.Fatalf("after down and up: full=%v ops=%v kept=%v, want a clean re-read", w.full, w.ops, f.ops)
	}
}

// recBatches covers every node once, in batches of recBatch at most, four
// or more when there are enough nodes, the last ones smaller.
func TestRecBatchesSplitAReadWithASmallTail(t *testing.T) {
	for n := 1; n <= 25_000; n += 1 + n/50 {
		sizes := recBatches(n)
		sum := 0
		for _, s := range sizes {
			if s < 1 || s > recBatch {
				t.Fatalf("n=%d: batch of %d in %v", n, s, sizes)
			}
			sum += s
		}
		if sum != n {
			t.Fatalf("n=%d: batches %v read %d", n, sizes, sum)
		}
		if n >= 4*recBatchMin && len(sizes) < 4 {
			t.Fatalf("n=%d: %d batches, want four or more", n, len(sizes))
		}
		if k := len(sizes); k > 1 && sizes[k-1] >= sizes[0] {
			t.Fatalf("n=%d: the last batch is not the smallest: %v", n, sizes)
		}
	}
	if got := recBatches(1000); !slices.Equal(got, []int{400, 300, 200, 100}) {
		t.Fatalf("recBatches(1000) = %v", got)
	}
}
