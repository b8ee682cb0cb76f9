package zktest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/gracekit/gracekit/internal/zkwire"
)

// bareBatch matches sd's bulkBatch: reads per multiRead request.
const bareBatch = 1000

// ZooKeeper opcodes used here.
const (
	opGetData     = 4
	opGetChildren = 8
	opMultiRead   = 22
)

// BareLoad is the floor of a service discovery load, for benchmarks: the
// bare requests the server must answer for a consumer to know a service,
// spoken on the wire with nothing around them. One TCP connection and
// session to the server at addr, getChildren of dir, then every child's
// data with multiRead (ZooKeeper 3.6+; pipelined batches of 1,000, as
// gracekit's bulk read sends them), and closeSession. No decoding, no
// watches, no client library: what is left is ZooKeeper's own work and the
// network, which no client can go below. It returns how many nodes it read.
func BareLoad(addr, dir string) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))

	if err := zkwire.WriteFrame(conn, zkwire.ConnectRequest(30*time.Second, 0, nil)); err != nil {
		return 0, err
	}
	resp, err := zkwire.ReadFrame(conn)
	if err != nil {
		return 0, err
	}
	if zkwire.SessionOf(resp) == 0 {
		return 0, errors.New("zktest: bare load: no session")
	}

	// getChildren: GetChildrenRequest{path, watch=false}.
	req := binary.BigEndian.AppendUint32(nil, 1)
	req = binary.BigEndian.AppendUint32(req, opGetChildren)
	req = bareString(req, dir)
	req = append(req, 0)
	if err := zkwire.WriteFrame(conn, req); err != nil {
		return 0, err
	}
	resp, err = zkwire.ReadFrame(conn)
	if err != nil {
		return 0, err
	}
	names, err := bareChildren(1, resp)
	if err != nil {
		return 0, err
	}

	// multiRead of getData, every batch sent before the first reply is read.
	var batches [][]string
	for len(names) > 0 {
		n := min(len(names), bareBatch)
		batches = append(batches, names[:n])
		names = names[n:]
	}
	for i, b := range batches {
		if err := zkwire.WriteFrame(conn, bareMultiRead(int32(i+2), dir, b)); err != nil {
			return 0, err
		}
	}
	read := 0
	for i, b := range batches {
		resp, err := zkwire.ReadFrame(conn)
		if err != nil {
			return 0, err
		}
		got, err := bareCount(int32(i+2), resp)
		if err != nil {
			return 0, err
		}
		if got != len(b) {
			return 0, fmt.Errorf("zktest: bare load: %d results for %d reads", got, len(b))
		}
		read += got
	}
	_ = zkwire.WriteFrame(conn, zkwire.CloseSession(int32(len(batches)+2)))
	return read, nil
}

func bareString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

var errBareShort = errors.New("zktest: bare load: short reply")

// replyBody checks ReplyHeader{xid, zxid, err} and returns what follows.
func bareReply(xid int32, b []byte) ([]byte, error) {
	if len(b) < 16 {
		return nil, errBareShort
	}
	if got := int32(binary.BigEndian.Uint32(b[0:4])); got != xid {
		return nil, fmt.Errorf("zktest: bare load: reply %d to request %d", got, xid)
	}
	if code := int32(binary.BigEndian.Uint32(b[12:16])); code != 0 {
		return nil, fmt.Errorf("zktest: bare load: server error %d", code)
	}
	return b[16:], nil
}

// parseChildren reads a GetChildrenResponse: a vector of strings.
func bareChildren(xid int32, b []byte) ([]string, error) {
	b, err := bareReply(xid, b)
	if err != nil {
		return nil, err
	}
	if len(b) < 4 {
		return nil, errBareShort
	}
	n := int(int32(binary.BigEndian.Uint32(b[0:4])))
	b = b[4:]
	out := make([]string, 0, max(n, 0))
	for range n {
		if len(b) < 4 {
			return nil, errBareShort
		}
		l := int(binary.BigEndian.Uint32(b[0:4]))
		if l > len(b)-4 {
			return nil, errBareShort
		}
		out = append(out, string(b[4:4+l]))
		b = b[4+l:]
	}
	return out, nil
}

// multiReadRequest asks for the data of dir/name for every name.
func bareMultiRead(xid int32, dir string, names []string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(xid))
	b = binary.BigEndian.AppendUint32(b, opMultiRead)
	for _, n := range names {
		// MultiHeader{type, done, err} then GetDataRequest{path, watch}.
		b = binary.BigEndian.AppendUint32(b, opGetData)
		b = append(b, 0)
		b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
		b = binary.BigEndian.AppendUint32(b, uint32(len(dir)+1+len(n)))
		b = append(b, dir...)
		b = append(b, '/')
		b = append(b, n...)
		b = append(b, 0)
	}
	b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF) // the closing MultiHeader
	b = append(b, 1)
	return binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
}

// countMultiRead walks a MultiResponse of getData results and counts the
// nodes read; a per-node error result is a failure of the floor run.
func bareCount(xid int32, b []byte) (int, error) {
	const headerLen, statLen = 9, 68
	b, err := bareReply(xid, b)
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		if len(b) < headerLen {
			return 0, errBareShort
		}
		typ, done := int32(binary.BigEndian.Uint32(b[0:4])), b[4] != 0
		b = b[headerLen:]
		if done {
			return n, nil
		}
		if typ != opGetData {
			return 0, fmt.Errorf("zktest: bare load: result type %d in a multiRead reply", typ)
		}
		if len(b) < 4 {
			return 0, errBareShort
		}
		l := max(int(int32(binary.BigEndian.Uint32(b[0:4]))), 0)
		if l+statLen > len(b)-4 {
			return 0, errBareShort
		}
		b = b[4+l+statLen:]
		n++
	}
}
