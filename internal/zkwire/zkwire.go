// Package zkwire holds the few pieces of ZooKeeper's wire protocol that
// gracekit speaks itself, where go-zookeeper has no API: length-prefixed
// frames and the session handshake. Used by sd's bulk reads and by zktest's
// forced session expiry.
package zkwire

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// MaxFrame bounds a frame read, against a corrupt length prefix.
const MaxFrame = 64 << 20

// WriteFrame writes b after its 4-byte big-endian length.
func WriteFrame(w io.Writer, b []byte) error {
	_, err := w.Write(append(binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b))), b...))
	return err
}

// ReadFrame reads one length-prefixed frame.
func ReadFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > MaxFrame {
		return nil, fmt.Errorf("zkwire: frame of %d bytes is over %d", size, MaxFrame)
	}
	b := make([]byte, size)
	_, err := io.ReadFull(r, b)
	return b, err
}

// ConnectRequest encodes a handshake with lastZxidSeen 0 (see
// ConnectRequestAt), for sessions that read nothing, such as a test's.
func ConnectRequest(timeout time.Duration, session int64, passwd []byte) []byte {
	return ConnectRequestAt(0, timeout, session, passwd)
}

// ConnectRequestAt encodes a handshake: protocolVersion 0, lastZxid (the
// highest zxid the client has seen: a server whose last is lower refuses
// the session by closing the connection), the session timeout, and the
// session to attach to (0 and a zero password for a new one).
func ConnectRequestAt(lastZxid int64, timeout time.Duration, session int64, passwd []byte) []byte {
	if passwd == nil {
		passwd = make([]byte, 16)
	}
	b := binary.BigEndian.AppendUint32(nil, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(max(lastZxid, 0)))
	b = binary.BigEndian.AppendUint32(b, uint32(timeout.Milliseconds()))
	b = binary.BigEndian.AppendUint64(b, uint64(session))
	b = binary.BigEndian.AppendUint32(b, uint32(len(passwd)))
	return append(b, passwd...)
}

// SessionOf returns the session id of a ConnectResponse (0 when refused).
func SessionOf(resp []byte) int64 {
	if len(resp) < 16 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(resp[8:16]))
}

// CloseSession encodes a closeSession request (opcode -11) with xid.
func CloseSession(xid int32) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(xid))
	return binary.BigEndian.AppendUint32(b, 0xFFFFFFF5)
}
