package sd

import (
	"context"
	"errors"
	"runtime"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/zkconn"
	"github.com/gracekit/gracekit/internal/zkwire"
)

// bulkSession is a zkconn.BulkSession of the own session's zxid order.
type bulkSession struct {
	*zkconn.BulkSession
	lineage uint64 // the own session's zxid order the handshake was in (Client.ownZxid)
}

// close closes s; it may be called on nil, and twice.
func (s *bulkSession) close() {
	if s != nil {
		s.Close()
	}
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
	err := s.Read(in.dir, names, func(first int, reads []zkwire.Read) {
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
	if z := s.LastZxid(); z != 0 {
		in.c.sawOwnZxid(s.lineage, z)
	}
	if err == nil && !complete {
		err = errBulkIncomplete
	}
	if err != nil {
		return nil, err
	}
	return decoded, nil
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
	s := zkconn.OpenBulk(in.ctx, in.c.SessionTimeout(), func(ctx context.Context) (*zkwire.Conn, error) {
		return in.c.dialWatch(ctx, addr, 0, nil, zxid, nil)
	})
	return &bulkSession{BulkSession: s, lineage: lineage}
}

// bulkChunk is how many nodes a decoding goroutine takes at a time.
const bulkChunk = 32
