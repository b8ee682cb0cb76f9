package zkwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

// Opcodes, special xids and modes this package speaks.
const (
	OpGetData     = 4
	OpGetChildren = 8
	OpSync        = 9
	OpPing        = 11
	OpMultiRead   = 22
	OpSetAuth     = 100
	// OpAddWatch (ZooKeeper 3.6+) sets a persistent watch; go-zookeeper
	// v1.0.4 has no request for it and no way to send a custom one.
	OpAddWatch = 106
	// OpRemoveWatches (3.5+) removes a path's watches of the session,
	// persistent ones included with WatcherAny.
	OpRemoveWatches = 18
	OpClose         = -11
	XidWatch        = -1 // a notification
	XidPing         = -2
	XidAuth         = -4
	StatBytes       = 68
	headerBytes     = 16 // ReplyHeader: xid, zxid, err
	multiHdrSize    = 9  // MultiHeader: type, done, err

	// AddWatch modes.
	ModePersistent          = 0
	ModePersistentRecursive = 1

	// WatcherAny is RemoveWatches' type for every watch on the path.
	WatcherAny = 3
)

// Notification types (WatcherEvent.Type), as go-zookeeper numbers them.
const (
	EventNodeCreated         = 1
	EventNodeDeleted         = 2
	EventNodeDataChanged     = 3
	EventNodeChildrenChanged = 4
)

// Server error codes this package names.
const (
	CodeMarshalling   = -5
	CodeUnimplemented = -6
	CodeNoNode        = -101
	CodeNoAuth        = -102
	CodeAuthFailed    = -115
	CodeThrottled     = -127 // ZooKeeper 3.7+: the server shed the request under load
)

// ErrShort is a reply cut before its end.
var ErrShort = errors.New("zkwire: short reply")

// Error is a server's error code. It unwraps to go-zookeeper's sentinel for
// the code, so errors.Is(err, zk.ErrNoNode) works.
type Error struct{ Code int32 }

func (e *Error) Error() string {
	if s := e.Unwrap(); s != nil {
		return fmt.Sprintf("zkwire: server error %d: %v", e.Code, s)
	}
	return fmt.Sprintf("zkwire: server error %d", e.Code)
}

// Unwrap returns go-zookeeper's error for the code, or nil.
func (e *Error) Unwrap() error {
	switch e.Code {
	case CodeNoNode:
		return zk.ErrNoNode
	case CodeNoAuth:
		return zk.ErrNoAuth
	case CodeAuthFailed:
		return zk.ErrAuthFailed
	case -112:
		return zk.ErrSessionExpired
	case -8:
		return zk.ErrBadArguments
	case -100:
		return zk.ErrAPIError
	}
	return nil
}

// Code returns the server error code of err, 0 when it has none.
func Code(err error) int32 {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// ConnectResponse is the server's answer to a handshake.
type ConnectResponse struct {
	ProtocolVersion int32
	Timeout         time.Duration // negotiated session timeout
	SessionID       int64         // 0: refused
	Passwd          []byte
}

// ParseConnectResponse decodes a ConnectResponse frame (a trailing
// read-only byte is ignored).
func ParseConnectResponse(b []byte) (ConnectResponse, error) {
	var r ConnectResponse
	d := decoder{b: b}
	r.ProtocolVersion = d.int32()
	r.Timeout = time.Duration(d.int32()) * time.Millisecond
	r.SessionID = d.int64()
	r.Passwd = d.buffer()
	if d.err != nil {
		return ConnectResponse{}, d.err
	}
	return r, nil
}

// ReplyHeader opens every reply and notification.
type ReplyHeader struct {
	Xid  int32
	Zxid int64
	Err  int32
}

// ParseReplyHeader decodes the header and returns the body after it.
func ParseReplyHeader(b []byte) (ReplyHeader, []byte, error) {
	if len(b) < headerBytes {
		return ReplyHeader{}, nil, ErrShort
	}
	return ReplyHeader{
		Xid:  int32(binary.BigEndian.Uint32(b[0:4])),
		Zxid: int64(binary.BigEndian.Uint64(b[4:12])),
		Err:  int32(binary.BigEndian.Uint32(b[12:16])),
	}, b[headerBytes:], nil
}

// WatcherEvent is a notification's body. Before ZooKeeper 3.9 it carries
// no zxid (ZOOKEEPER-4655): its place in the connection's stream is its
// only order.
type WatcherEvent struct {
	Type  int32
	State int32
	Path  string
}

// ParseWatcherEvent decodes a notification body.
func ParseWatcherEvent(b []byte) (WatcherEvent, error) {
	d := decoder{b: b}
	ev := WatcherEvent{Type: d.int32(), State: d.int32(), Path: d.string()}
	if d.err != nil {
		return WatcherEvent{}, d.err
	}
	return ev, nil
}

// Stat is the part of a node's stat that gracekit reads.
type Stat struct {
	Czxid, Mzxid   int64
	Version        int32
	EphemeralOwner int64
	NumChildren    int32
}

func (d *decoder) stat() Stat {
	if d.err != nil || len(d.b) < StatBytes {
		d.fail()
		return Stat{}
	}
	b := d.b
	s := Stat{
		Czxid:          int64(binary.BigEndian.Uint64(b[0:8])),
		Mzxid:          int64(binary.BigEndian.Uint64(b[8:16])),
		Version:        int32(binary.BigEndian.Uint32(b[32:36])),
		EphemeralOwner: int64(binary.BigEndian.Uint64(b[44:52])),
		NumChildren:    int32(binary.BigEndian.Uint32(b[56:60])),
	}
	d.b = b[StatBytes:]
	return s
}

// Request encodes a request frame body: RequestHeader{xid, op} then body.
func Request(xid, op int32, body []byte) []byte {
	b := make([]byte, 0, 8+len(body))
	b = binary.BigEndian.AppendUint32(b, uint32(xid))
	b = binary.BigEndian.AppendUint32(b, uint32(op))
	return append(b, body...)
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// AddWatchBody is AddWatchRequest{path, mode}.
func AddWatchBody(path string, mode int32) []byte {
	return binary.BigEndian.AppendUint32(appendString(nil, path), uint32(mode))
}

// RemoveWatchesBody is RemoveWatchesRequest{path, type}.
func RemoveWatchesBody(path string, typ int32) []byte {
	return binary.BigEndian.AppendUint32(appendString(nil, path), uint32(typ))
}

// GetDataBody is GetDataRequest{path, watch=false}.
func GetDataBody(path string) []byte { return append(appendString(nil, path), 0) }

// GetChildrenBody is GetChildrenRequest{path, watch=false}.
func GetChildrenBody(path string) []byte { return append(appendString(nil, path), 0) }

// SyncBody is SyncRequest{path}. A sync makes the server the session is
// on catch up with the leader before it answers the session's later
// requests, so that a read sent behind it sees every write the ensemble
// committed before the sync.
func SyncBody(path string) []byte { return appendString(nil, path) }

// AuthBody is AuthPacket{type 0, scheme, auth}, sent with XidAuth.
func AuthBody(scheme string, auth []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, 0)
	b = appendString(b, scheme)
	b = binary.BigEndian.AppendUint32(b, uint32(len(auth)))
	return append(b, auth...)
}

// MultiGetDataBody is a MultiRequest of GetDataRequests without watches,
// for the children names of dir: the paths are written straight into the
// request, never made as strings.
func MultiGetDataBody(dir string, names []string) []byte {
	size := multiHdrSize
	for _, n := range names {
		size += multiHdrSize + 4 + len(dir) + 1 + len(n) + 1
	}
	b := make([]byte, 0, size) // a load's batches are tens of kilobytes: no growing
	for _, n := range names {
		// MultiHeader{type, done, err} then GetDataRequest{path, watch}.
		b = binary.BigEndian.AppendUint32(b, OpGetData)
		b = append(b, 0)
		b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
		b = binary.BigEndian.AppendUint32(b, uint32(len(dir)+1+len(n)))
		b = append(b, dir...)
		b = append(b, '/')
		b = append(append(b, n...), 0)
	}
	b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF) // the closing MultiHeader
	b = append(b, 1)
	return binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
}

// ParseGetData decodes GetDataResponse{data, stat}. data aliases b.
func ParseGetData(b []byte) ([]byte, Stat, error) {
	d := decoder{b: b}
	data := d.buffer()
	st := d.stat()
	return data, st, d.err
}

// ParseChildren decodes GetChildrenResponse{children}.
func ParseChildren(b []byte) ([]string, error) {
	d := decoder{b: b}
	n := d.int32()
	if n < 0 {
		return nil, d.err
	}
	// Each name takes at least its 4-byte length: a hostile count cannot
	// make us allocate more than the frame holds.
	if d.err == nil && int(n) > len(d.b)/4 {
		return nil, ErrShort
	}
	out := make([]string, 0, n)
	for range n {
		out = append(out, d.string())
	}
	if d.err != nil {
		return nil, d.err
	}
	return out, nil
}

// Read is one result of a multiRead of getData.
type Read struct {
	Data []byte // aliases the reply
	Stat Stat
	Err  int32 // the server's code for this node alone (e.g. CodeNoNode); 0 when read
}

// ParseMultiGetData decodes a MultiResponse to MultiGetDataBody. Errors of
// one node are its Read's Err; the rest is read.
func ParseMultiGetData(b []byte) ([]Read, error) { return AppendMultiGetData(nil, b) }

// AppendMultiGetData is ParseMultiGetData appending to out, which a caller
// that knows how many reads it asked for sizes once.
func AppendMultiGetData(out []Read, b []byte) ([]Read, error) {
	for {
		if len(b) < multiHdrSize {
			return nil, ErrShort
		}
		// The header's own err field is -1 on an ErrorResult, whose body
		// holds the code: it is read there.
		typ, done := int32(binary.BigEndian.Uint32(b[0:4])), b[4] != 0
		b = b[multiHdrSize:]
		if done {
			return out, nil
		}
		switch typ {
		case OpGetData:
			d := decoder{b: b}
			data := d.buffer()
			st := d.stat()
			if d.err != nil {
				return nil, d.err
			}
			b = d.b
			out = append(out, Read{Data: data, Stat: st})
		case -1: // ErrorResult{err}: this node only
			if len(b) < 4 {
				return nil, ErrShort
			}
			code := int32(binary.BigEndian.Uint32(b[0:4]))
			if code == 0 {
				code = -1
			}
			b = b[4:]
			out = append(out, Read{Err: code})
		default:
			return nil, fmt.Errorf("zkwire: multiRead: unexpected result type %d", typ)
		}
	}
}

// decoder reads jute fields; the first short read sets err and makes every
// later read return zero.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = ErrShort
	}
	d.b = nil
}

func (d *decoder) int32() int32 {
	if d.err != nil || len(d.b) < 4 {
		d.fail()
		return 0
	}
	v := int32(binary.BigEndian.Uint32(d.b))
	d.b = d.b[4:]
	return v
}

func (d *decoder) int64() int64 {
	if d.err != nil || len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := int64(binary.BigEndian.Uint64(d.b))
	d.b = d.b[8:]
	return v
}

// buffer reads a length-prefixed byte string; -1 is nil.
func (d *decoder) buffer() []byte {
	n := d.int32()
	if d.err != nil || n <= 0 {
		return nil
	}
	if int(n) > len(d.b) {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string { return string(d.buffer()) }
