package sd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"path"
	"runtime"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/zkwire"
)

// bulkSession reads the data of many nodes with ZooKeeper's multiRead
// (opcode 22, ZooKeeper 3.6+) over a short-lived session of its own on
// one server, a few requests in all instead of one per node.
//
// Written by hand because go-zookeeper v1.0.4 has no multiRead; it speaks
// only what this needs: the handshake, multiRead of getData, closeSession.
// It sets no watches: the Instancer arms them afterwards, and a change in
// between shows in what that arming reads. Any failure makes the caller
// fall back to one read per node.
//
// The session is opened ahead (openBulk) so that its handshake overlaps
// the children listing on the main connection; read waits for it.
type bulkSession struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the handshake ended
	conn   net.Conn      // set before done; nil when the handshake failed
	err    error
	stop   func() bool // ends the ctx watch on conn
	used   bool
	once   sync.Once
}

// openBulk starts the handshake with addr, dialled with dial (nil: a
// net.Dialer, which close interrupts). Everything it does, reads
// included, ends within timeout, or when ctx ends. Close it.
func openBulk(ctx context.Context, dial DialFunc, addr string, timeout time.Duration) *bulkSession {
	ctx, cancel := context.WithCancel(ctx)
	s := &bulkSession{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.conn, s.stop, s.err = bulkHandshake(ctx, dial, addr, timeout)
	}()
	return s
}

func bulkHandshake(ctx context.Context, dial DialFunc, addr string, timeout time.Duration) (net.Conn, func() bool, error) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return nil, nil, context.DeadlineExceeded
	}
	var conn net.Conn
	var err error
	if dial == nil {
		d := net.Dialer{Timeout: timeout}
		conn, err = d.DialContext(ctx, "tcp", addr)
	} else {
		conn, err = dial("tcp", addr, timeout)
	}
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	_ = conn.SetDeadline(time.Now().Add(timeout))
	fail := func(err error) (net.Conn, func() bool, error) {
		stop()
		conn.Close()
		return nil, nil, err
	}
	if err := zkwire.WriteFrame(conn, zkwire.ConnectRequest(max(timeout, 2*time.Second), 0, nil)); err != nil {
		return fail(err)
	}
	resp, err := zkwire.ReadFrame(conn)
	if err != nil {
		return fail(err)
	}
	if zkwire.SessionOf(resp) == 0 {
		return fail(errors.New("sd: bulk read: no session"))
	}
	return conn, stop, nil
}

// read waits for the handshake and reads paths, every batch sent before
// the first reply is read: one round trip in all. It hands each batch's
// results to got as they arrive, in order, first being the index of the
// batch's first path. One read per session.
func (s *bulkSession) read(paths []string, got func(first int, res []bulkResult)) error {
	<-s.done
	if s.err != nil {
		return s.err
	}
	if s.used {
		return errors.New("sd: bulk read: session used")
	}
	s.used = true
	conn := s.conn
	nb := (len(paths) + bulkBatch - 1) / bulkBatch
	for i := range nb {
		b := paths[i*bulkBatch : min(len(paths), (i+1)*bulkBatch)]
		if err := zkwire.WriteFrame(conn, multiReadRequest(int32(i+1), b)); err != nil {
			return err
		}
	}
	for i := range nb {
		want := min(len(paths), (i+1)*bulkBatch) - i*bulkBatch
		resp, err := zkwire.ReadFrame(conn)
		if err != nil {
			return err
		}
		res, err := parseMultiRead(int32(i+1), resp)
		if err != nil {
			return err
		}
		if len(res) != want {
			return fmt.Errorf("sd: bulk read: %d results for %d reads", len(res), want)
		}
		got(i*bulkBatch, res)
	}
	// closeSession, so the server frees it now rather than at its timeout.
	_ = zkwire.WriteFrame(conn, zkwire.CloseSession(int32(nb+1)))
	return nil
}

var errBulkIncomplete = errors.New("sd: bulk read: a node was gone or unreadable; the set would not be complete")

// bulkDecode reads names (children of in.dir) over s and decodes them,
// each batch on every core while the next is on its way: decoding
// Curator JSON costs about as much as reading it.
func (in *Instancer) bulkDecode(s *bulkSession, names []string) ([]*entry, error) {
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = path.Join(in.dir, n)
	}
	type chunk struct {
		first int
		res   []bulkResult
	}
	decoded := make([]*entry, len(names))
	chunks := make(chan chunk, (len(names)+bulkChunk-1)/bulkChunk)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for c := range chunks {
				for i := range c.res {
					r := &c.res[i]
					decoded[c.first+i] = in.decode(names[c.first+i], r.data, &r.stat)
				}
			}
		})
	}
	complete := true
	err := s.read(paths, func(first int, res []bulkResult) {
		for _, r := range res {
			complete = complete && r.ok
		}
		if !complete {
			return // gone or unreadable: not worth decoding
		}
		for len(res) > 0 {
			n := min(len(res), bulkChunk)
			chunks <- chunk{first, res[:n]}
			first, res = first+n, res[n:]
		}
	})
	close(chunks)
	wg.Wait()
	if err == nil && !complete {
		err = errBulkIncomplete
	}
	if err != nil {
		return nil, err
	}
	return decoded, nil
}

// close ends the session, waiting for the handshake. It may be called on
// nil, and twice.
func (s *bulkSession) close() {
	if s == nil {
		return
	}
	s.once.Do(func() {
		defer s.cancel()
		select {
		case <-s.done:
		default:
			s.cancel() // interrupt the handshake
			<-s.done
		}
		if s.conn == nil {
			return
		}
		if s.stop() && !s.used {
			// Opened for nothing (a small load): free it on the server now.
			_ = zkwire.WriteFrame(s.conn, zkwire.CloseSession(1))
		}
		s.conn.Close()
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
// watches are armed after the bulk read: it waits for that session, which
// NewClient may not have dialled yet.
func (in *Instancer) openBulk() *bulkSession {
	if in.c.awaitSettled(in.ctx) != nil {
		return nil
	}
	return openBulk(in.ctx, in.c.opts.dialer, in.c.zk().Server(), in.c.SessionTimeout())
}

const (
	// Reads per multiRead request: small enough that one batch is decoded
	// while the server answers the next.
	bulkBatch        = 250
	bulkChunk        = 32 // nodes a decoding goroutine takes at a time
	opGetData        = 4
	opMultiRead      = 22
	statLen          = 68
	multiHeaderBytes = 9
)

type bulkResult struct {
	data []byte
	stat zk.Stat
	ok   bool // false: the node was gone (or unreadable) when read
}

func multiReadRequest(xid int32, paths []string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(xid))
	b = binary.BigEndian.AppendUint32(b, opMultiRead)
	for _, p := range paths {
		// MultiHeader{type, done, err} then GetDataRequest{path, watch}.
		b = binary.BigEndian.AppendUint32(b, opGetData)
		b = append(b, 0)
		b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
		b = append(b, 0)
	}
	b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF) // the closing MultiHeader
	b = append(b, 1)
	return binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
}

var errShort = errors.New("sd: bulk read: short reply")

// parseMultiRead reads ReplyHeader{xid, zxid, err} and the MultiResponse.
func parseMultiRead(xid int32, b []byte) ([]bulkResult, error) {
	if len(b) < 16 {
		return nil, errShort
	}
	if got := int32(binary.BigEndian.Uint32(b[0:4])); got != xid {
		return nil, fmt.Errorf("sd: bulk read: reply %d to request %d", got, xid)
	}
	if code := int32(binary.BigEndian.Uint32(b[12:16])); code != 0 {
		return nil, fmt.Errorf("sd: bulk read: server error %d", code)
	}
	b = b[16:]
	var out []bulkResult
	for {
		if len(b) < multiHeaderBytes {
			return nil, errShort
		}
		typ, done := int32(binary.BigEndian.Uint32(b[0:4])), b[4] != 0
		b = b[multiHeaderBytes:]
		if done {
			return out, nil
		}
		switch typ {
		case opGetData:
			if len(b) < 4 {
				return nil, errShort
			}
			n := int32(binary.BigEndian.Uint32(b[0:4]))
			b = b[4:]
			var data []byte
			if n > 0 {
				if int(n) > len(b) {
					return nil, errShort
				}
				data, b = b[:n], b[n:]
			}
			if len(b) < statLen {
				return nil, errShort
			}
			st := zk.Stat{
				Czxid:          int64(binary.BigEndian.Uint64(b[0:8])),
				Mzxid:          int64(binary.BigEndian.Uint64(b[8:16])),
				Version:        int32(binary.BigEndian.Uint32(b[32:36])),
				EphemeralOwner: int64(binary.BigEndian.Uint64(b[44:52])),
			}
			b = b[statLen:]
			out = append(out, bulkResult{data: data, stat: st, ok: true})
		case -1: // ErrorResult{err}: this node only (e.g. -101, gone)
			if len(b) < 4 {
				return nil, errShort
			}
			b = b[4:]
			out = append(out, bulkResult{})
		default:
			return nil, fmt.Errorf("sd: bulk read: unexpected result type %d", typ)
		}
	}
}
