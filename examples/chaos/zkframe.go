package main

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// ZooKeeper's framing, as much of it as the proxy's lostreply fault needs
// (zookeeper.jute, ClientCnxn): every packet, both ways, is a 4-byte
// big-endian length and that many bytes. The first packet each way is the
// handshake (ConnectRequest, ConnectResponse). After it a request starts
// with its xid and opcode (RequestHeader), a reply with its xid, the
// zxid and an error code (ReplyHeader); xid -1 is a watch notification,
// -2 a ping's answer.

// The opcodes a schedule may lose the reply of, by the name the schedule
// prints (ZooDefs.OpCode).
var zkOps = map[string]int32{
	"create":          1,
	"delete":          2,
	"exists":          3,
	"getData":         4,
	"setData":         5,
	"getChildren":     8,
	"sync":            9,
	"getChildren2":    12,
	"multi":           14,
	"create2":         15,
	"createContainer": 19,
	"multiRead":       22,
	"addWatch":        106,
}

// maxFrame is the largest length taken for a packet: ZooKeeper refuses
// more than jute.maxbuffer (1 MiB by default) anyway; a larger one means
// the stream is not ZooKeeper's, and the framer stops parsing.
const maxFrame = 64 << 20

// opName is the schedule's name of opcode op.
func opName(op int32) string {
	for name, o := range zkOps {
		if o == op {
			return name
		}
	}
	return fmt.Sprintf("op%d", op)
}

// opNames are zkOps' names, sorted, for a schedule to draw from.
func opNames() []string {
	var out []string
	for name := range zkOps {
		out = append(out, name)
	}
	slices.SortFunc(out, strings.Compare)
	return out
}

// framer splits one direction of a connection into packets. It keeps a
// packet's first bytes until the rest came; past a length it cannot
// believe it gives up parsing and hands bytes on as they come.
type framer struct {
	buf    []byte
	seen   int  // packets split so far: the first is the handshake
	broken bool // not ZooKeeper framing: bytes pass as they come
}

// feed adds b and returns the complete packets it ends, each with its
// length prefix, in order; and raw, bytes to pass on unparsed (only once
// broken). The packets' slices are the framer's own copies.
func (f *framer) feed(b []byte) (packets [][]byte, raw []byte) {
	if f.broken {
		return nil, b
	}
	f.buf = append(f.buf, b...)
	for len(f.buf) >= 4 {
		n := int64(binary.BigEndian.Uint32(f.buf[:4]))
		if n > maxFrame {
			f.broken = true
			raw, f.buf = f.buf, nil
			return packets, raw
		}
		if int64(len(f.buf)) < 4+n {
			break
		}
		packets = append(packets, slices.Clone(f.buf[:4+n]))
		f.buf = f.buf[4+n:]
		f.seen++
	}
	if len(f.buf) == 0 {
		f.buf = nil // let the backing array go
	}
	return packets, nil
}

// requestHeader is a request packet's xid and opcode; ok is false for a
// packet too short to carry them.
func requestHeader(packet []byte) (xid, op int32, ok bool) {
	if len(packet) < 12 {
		return 0, 0, false
	}
	return int32(binary.BigEndian.Uint32(packet[4:8])), int32(binary.BigEndian.Uint32(packet[8:12])), true
}

// replyHeader is a reply packet's xid, zxid and error code; ok is false
// for a packet too short to carry them.
func replyHeader(packet []byte) (xid int32, zxid int64, code int32, ok bool) {
	if len(packet) < 20 {
		return 0, 0, 0, false
	}
	return int32(binary.BigEndian.Uint32(packet[4:8])), int64(binary.BigEndian.Uint64(packet[8:16])),
		int32(binary.BigEndian.Uint32(packet[16:20])), true
}

// connectSession is the session id of a ConnectResponse packet (length,
// protocol version, timeout, session id); 0 when too short.
func connectSession(packet []byte) int64 {
	if len(packet) < 20 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(packet[12:20]))
}
