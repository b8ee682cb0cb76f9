package sd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/zkwire"
)

// bulkRead reads the data of many nodes with ZooKeeper's multiRead
// (opcode 22, ZooKeeper 3.6+) over a short-lived session of its own on the
// server at addr, a few requests in all instead of one per node.
//
// Written by hand because go-zookeeper v1.0.4 has no multiRead; it speaks
// only what this needs: the handshake, multiRead of getData, closeSession.
// It sets no watches: the Instancer arms them afterwards, and a change in
// between shows in what that arming reads. Any failure makes the caller
// fall back to one read per node.
func bulkRead(ctx context.Context, dial func(network, addr string, timeout time.Duration) (net.Conn, error),
	addr string, paths []string, timeout time.Duration) ([]bulkResult, error) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return nil, context.DeadlineExceeded
	}
	conn, err := dial("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	_ = conn.SetDeadline(time.Now().Add(timeout))

	if err := zkwire.WriteFrame(conn, zkwire.ConnectRequest(max(timeout, 2*time.Second), 0, nil)); err != nil {
		return nil, err
	}
	resp, err := zkwire.ReadFrame(conn)
	if err != nil {
		return nil, err
	}
	if zkwire.SessionOf(resp) == 0 {
		return nil, errors.New("sd: bulk read: no session")
	}

	// Send every batch, then read the replies: one round trip in all.
	var batches [][]string
	for len(paths) > 0 {
		n := min(len(paths), bulkBatch)
		batches = append(batches, paths[:n])
		paths = paths[n:]
	}
	for i, b := range batches {
		if err := zkwire.WriteFrame(conn, multiReadRequest(int32(i+1), b)); err != nil {
			return nil, err
		}
	}
	var out []bulkResult
	for i, b := range batches {
		resp, err := zkwire.ReadFrame(conn)
		if err != nil {
			return nil, err
		}
		res, err := parseMultiRead(int32(i+1), resp)
		if err != nil {
			return nil, err
		}
		if len(res) != len(b) {
			return nil, fmt.Errorf("sd: bulk read: %d results for %d reads", len(res), len(b))
		}
		out = append(out, res...)
	}
	// closeSession, so the server frees it now rather than at its timeout.
	_ = zkwire.WriteFrame(conn, zkwire.CloseSession(int32(len(batches)+1)))
	return out, nil
}

const (
	bulkBatch        = 1000 // reads per multiRead request
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
