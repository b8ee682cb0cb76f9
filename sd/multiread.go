package sd

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/zkwire"
)

// bulkSession reads the data of many nodes with ZooKeeper's multiRead
// (opcode 22, ZooKeeper 3.6+) for the per-node mode's loads, over a
// short-lived zkwire session of its own on the server of the Client's
// session (go-zookeeper v1.0.4 has no multiRead), a few requests in all
// instead of one per node. It sets no watches: the Instancer arms them
// afterwards, and a change in between shows in what that arming reads.
// Any failure makes the caller fall back to one read per node.
//
// The session is opened ahead (openBulk) so that its handshake overlaps
// the children listing on the main connection; read waits for it.
type bulkSession struct {
	ctx     context.Context
	cancel  context.CancelFunc
	timeout time.Duration
	done    chan struct{} // closed when the handshake ended
	conn    *zkwire.Conn  // set before done; nil when the handshake failed
	err     error
	used    bool
	once    sync.Once
	lineage uint64 // the own session's zxid order the handshake was in (Client.ownZxid)
}

// openBulk starts dial, which makes the session. Everything the session
// does, reads included, ends within timeout, or when ctx ends. Close it.
func openBulk(ctx context.Context, timeout time.Duration, dial func(context.Context) (*zkwire.Conn, error)) *bulkSession {
	ctx, cancel := context.WithCancel(ctx)
	s := &bulkSession{ctx: ctx, cancel: cancel, timeout: timeout, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		dctx, dcancel := context.WithTimeout(ctx, timeout)
		defer dcancel()
		s.conn, s.err = dial(dctx)
	}()
	return s
}

// read waits for the handshake and reads the children names of dir with
// readBulk, handing each batch to got as it arrives, in order, with the
// index of its first name. One read per session.
func (s *bulkSession) read(dir string, names []string, got func(first int, reads []zkwire.Read)) error {
	<-s.done
	if s.err != nil {
		return s.err
	}
	if s.used {
		return errors.New("sd: bulk read: session used")
	}
	s.used = true
	ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	defer cancel()
	// got hands the reads to other goroutines: their frames stay theirs.
	_, _, err := readBulk(ctx, s.conn, dir, names, false, nil, func(reads []zkwire.Read, lo int, _ bool) { got(lo, reads) })
	return err
}

var errBulkIncomplete = errors.New("sd: bulk read: a node was gone or unreadable; the set would not be complete")

// bulkDecode reads names (children of in.dir) over s and decodes them,
// each batch on every core while the next is on its way: decoding
// Curator JSON costs about as much as reading it.
func (in *Instancer) bulkDecode(s *bulkSession, names []string) ([]*entry, error) {
	type chunk struct {
		first int
		reads []zkwire.Read
	}
	decoded := make([]*entry, len(names))
	chunks := make(chan chunk, (len(names)+bulkChunk-1)/bulkChunk)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for c := range chunks {
				for i := range c.reads {
					r := &c.reads[i]
					st := zk.Stat{Czxid: r.Stat.Czxid, Mzxid: r.Stat.Mzxid, Version: r.Stat.Version, EphemeralOwner: r.Stat.EphemeralOwner}
					decoded[c.first+i] = in.decode(names[c.first+i], r.Data, &st)
				}
			}
		})
	}
	complete := true
	err := s.read(in.dir, names, func(first int, reads []zkwire.Read) {
		for i := range reads {
			complete = complete && reads[i].Err == 0
		}
		if !complete {
			return // gone or unreadable: not worth decoding
		}
		for len(reads) > 0 {
			n := min(len(reads), bulkChunk)
			chunks <- chunk{first, reads[:n]}
			first, reads = first+n, reads[n:]
		}
	})
	close(chunks)
	wg.Wait()
	if s.conn != nil { // set once read returned
		in.c.sawOwnZxid(s.lineage, s.conn.LastZxid())
	}
	if err == nil && !complete {
		err = errBulkIncomplete
	}
	if err != nil {
		return nil, err
	}
	return decoded, nil
}

// close ends the session (closeSession, so the server frees it now rather
// than at its timeout), interrupting a handshake under way. It may be
// called on nil, and twice.
func (s *bulkSession) close() {
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

// openBulkAhead opens the bulk session of a full load before its listing,
// unless the service held fewer than bulkMin nodes when last read: a
// small load would not use it.
func (in *Instancer) openBulkAhead() *bulkSession {
	in.mu.Lock()
	small := in.firstDone && len(in.entries) < bulkMin
	in.mu.Unlock()
	if small || in.opts.noBulk {
		return nil
	}
	return in.openBulk()
}

// openBulk dials the server of the Client's own session, where the
// watches are armed after the bulk read, authenticated as the Client is:
// it waits for that session, which NewClient may not have dialled yet.
func (in *Instancer) openBulk() *bulkSession {
	if in.c.awaitSettled(in.ctx) != nil {
		return nil
	}
	addr := in.c.zk().Server()
	// It sends the own session's last zxid: it is on the same server, and
	// reads what the own session's watches are then armed on.
	lineage, zxid := in.c.ownZxid()
	s := openBulk(in.ctx, in.c.SessionTimeout(), func(ctx context.Context) (*zkwire.Conn, error) {
		return in.c.dialWatch(ctx, addr, 0, nil, zxid, nil)
	})
	s.lineage = lineage
	return s
}

// bulkChunk is how many nodes a decoding goroutine takes at a time.
const bulkChunk = 32
