package zkconn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gracekit/gracekit/internal/zkwire"
)

// Reads per multiRead request.
const (
	batchMin = 64
	maxBatch = 1000
)

// BulkSession reads the data of many nodes with ZooKeeper's multiRead
// (opcode 22, ZooKeeper 3.6+) for the per-node mode's loads, over a
// short-lived zkwire session of its own on the server of the Client's
// session (go-zookeeper v1.0.4 has no multiRead), a few requests in all
// instead of one per node. It sets no watches: the caller (sd's Instancer)
// arms them afterwards, and a change in between shows in what that arming
// reads. Any failure makes sd fall back to one read per node; decoding is
// sd's too.
//
// The session is opened ahead (OpenBulk) so that its handshake overlaps
// the children listing on the main connection; Read waits for it.
type BulkSession struct {
	ctx     context.Context
	cancel  context.CancelFunc
	timeout time.Duration
	done    chan struct{} // closed when the handshake ended
	conn    *zkwire.Conn  // set before done; nil when the handshake failed
	err     error
	used    bool
	once    sync.Once
}

// OpenBulk starts dial, which makes the session. Everything the session
// does, reads included, ends within timeout, or when ctx ends. Close it.
func OpenBulk(ctx context.Context, timeout time.Duration, dial func(context.Context) (*zkwire.Conn, error)) *BulkSession {
	ctx, cancel := context.WithCancel(ctx)
	s := &BulkSession{ctx: ctx, cancel: cancel, timeout: timeout, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		dctx, dcancel := context.WithTimeout(ctx, timeout)
		defer dcancel()
		s.conn, s.err = dial(dctx)
	}()
	return s
}

// Read waits for the handshake and reads the children names of dir with
// readBulk, handing each batch to got as it arrives, in order, with the
// index of its first name. One read per session.
func (s *BulkSession) Read(dir string, names []string, got func(first int, reads []zkwire.Read)) error {
	<-s.done
	if s.err != nil {
		return s.err
	}
	if s.used {
		return errors.New("zkconn: bulk read: session used")
	}
	s.used = true
	ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	defer cancel()
	// got hands the reads to other goroutines: their frames stay theirs.
	_, _, err := readBulk(ctx, s.conn, dir, names, false, nil, func(reads []zkwire.Read, lo int, _ bool) { got(lo, reads) })
	return err
}

// LastZxid is the highest zxid the session saw (zkwire.Conn.LastZxid), 0
// when its handshake failed. Call it after Read.
func (s *BulkSession) LastZxid() int64 {
	<-s.done
	if s.conn == nil {
		return 0
	}
	return s.conn.LastZxid()
}

// Close ends the session (closeSession, so the server frees it now rather
// than at its timeout), interrupting a handshake under way. It may be
// called on nil, and twice.
func (s *BulkSession) Close() {
	if s == nil {
		return
	}
	s.once.Do(func() {
		s.cancel()
		<-s.done
		if s.conn != nil {
			s.conn.Close()
		}
	})
}

// batches splits a read of n nodes into multiRead batches: four when n
// allows (at least batchMin a batch on average), more when a batch
// would hold over maxBatch. All but the last are decoded while the server
// still produces the rest (it answers a session's requests one at a time),
// and the last three shrink (3/4, 1/2 and 1/4 of the others) so that
// little is left to decode once it is done: the server's time depends on
// the number of batches, not their sizes. More batches cost it more than
// they save: 8 × 125 reads took it 0.7 ms longer than one of 1,000, 4 ×
// 250 only 0.2 ms.
func batches(n int) []int {
	weight := func(k, i int) int { return min(4, k-i) } // ..., 4, 4, 3, 2, 1
	for k := max(1, min(4, n/batchMin)); ; k++ {
		sum := 0
		for i := range k {
			sum += weight(k, i)
		}
		if n*weight(k, 0) > maxBatch*sum {
			continue // the biggest is over maxBatch
		}
		sizes := make([]int, k)
		left := n
		for i := range k - 1 {
			sizes[i] = n * weight(k, i) / sum
			left -= sizes[i]
		}
		sizes[k-1] = left
		return sizes
	}
}

// ReadNodes reads the children names of dir over conn: with multiRead in
// batches when bulk, else one getData each, at most concurrency in flight.
// A node's own error (gone, an ACL) is its Read's Err; seqs are the stream
// positions of the replies. start runs once the first request is out,
// before any reply is handed on. Each batch, once in, goes to got with the
// index of its first read and whether replies are still to come; single
// reads go to got one by one, from the goroutine that read each.
func ReadNodes(ctx context.Context, conn *zkwire.Conn, dir string, names []string, bulk bool, concurrency int, start func(), got func(reads []zkwire.Read, lo int, more bool)) ([]zkwire.Read, []uint64, error) {
	if bulk {
		return readBulk(ctx, conn, dir, names, true, start, got)
	}
	start()
	return readEach(ctx, conn, dir, names, concurrency, got)
}

// readBulk sends the first batch as soon as it is written, then the others
// at once, from here: the server answers a session's requests in order, so
// it works on the first while the rest are written, and waiting for each
// reply in turn waits for nothing. No goroutine per batch grows a stack to
// decode.
//
// With release, got has decoded each batch when it returns, and its reply
// frame is given back for a later batch (zkwire.Reply.Release).
func readBulk(ctx context.Context, conn *zkwire.Conn, dir string, names []string, release bool, start func(), got func([]zkwire.Read, int, bool)) ([]zkwire.Read, []uint64, error) {
	sizes := batches(len(names))
	req := func(lo, k int) zkwire.Req {
		return zkwire.Req{Op: zkwire.OpMultiRead, Body: zkwire.MultiGetDataBody(dir, names[lo:lo+sizes[k]])}
	}
	calls := conn.SendAll(req(0, 0))
	if len(sizes) > 1 {
		rest := make([]zkwire.Req, 0, len(sizes)-1)
		for k, lo := 1, sizes[0]; k < len(sizes); k++ {
			rest = append(rest, req(lo, k))
			lo += sizes[k]
		}
		calls = append(calls, conn.SendAll(rest...)...)
	}
	if start != nil {
		start()
	}
	reads := make([]zkwire.Read, len(names))
	seqs := make([]uint64, len(names))
	for k, lo := 0, 0; k < len(calls); k++ {
		hi := lo + sizes[k]
		r, err := calls[k].Wait(ctx)
		if err != nil {
			return nil, nil, err
		}
		// Parsed in place: a reply with more results than asked outgrows
		// the batch's capacity into a copy, and is refused below.
		res, err := zkwire.AppendMultiGetData(reads[lo:lo:hi], r.Body)
		if err == nil && len(res) != hi-lo {
			err = fmt.Errorf("zkconn: multiRead: %d results for %d reads", len(res), hi-lo)
		}
		if err != nil {
			return nil, nil, err
		}
		for i := lo; i < hi; i++ {
			seqs[i] = r.Seq
		}
		got(reads[lo:hi], lo, k < len(calls)-1)
		if release {
			// Decoded: what was kept of the nodes is copied out of the
			// reply (KeepNodeData clones), so its frame can take a later
			// batch.
			for i := lo; i < hi; i++ {
				reads[i].Data = nil
			}
			r.Release()
		}
		lo = hi
	}
	return reads, seqs, nil
}

// readEach reads one node per getData, concurrency at a time. Each read
// goes to got alone (more true: one read is decoded where it is).
func readEach(ctx context.Context, conn *zkwire.Conn, dir string, names []string, concurrency int, got func([]zkwire.Read, int, bool)) ([]zkwire.Read, []uint64, error) {
	reads := make([]zkwire.Read, len(names))
	seqs := make([]uint64, len(names))
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	var next atomic.Int64
	for range min(concurrency, len(names)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(names); i = int(next.Add(1) - 1) {
				r, err := conn.Do(ctx, zkwire.OpGetData, zkwire.GetDataBody(dir+"/"+names[i]))
				if code := zkwire.Code(err); code != 0 {
					reads[i], seqs[i] = zkwire.Read{Err: code}, r.Seq
					continue
				}
				if err == nil {
					var rd zkwire.Read
					rd.Data, rd.Stat, err = zkwire.ParseGetData(r.Body)
					reads[i], seqs[i] = rd, r.Seq
				}
				if err != nil {
					mu.Lock()
					firstErr = cmp.Or(firstErr, err)
					mu.Unlock()
					return
				}
				got(reads[i:i+1], i, true)
			}
		})
	}
	wg.Wait()
	return reads, seqs, firstErr
}
