package zkconn

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracekit/gracekit/internal/zkwire"
)

// newFence is a Fence of its own atomics, for one test.
func newFence() *Fence {
	return &Fence{
		Zxid: new(atomic.Int64), ReplyZxid: new(atomic.Int64), Timeout: new(atomic.Int64), Refused: new(atomic.Pointer[string]),
		Lost: func() bool { return false }, HandshakeWait: func() time.Duration { return time.Second },
	}
}

// frame is a reply frame: length, xid, zxid, err and a body.
func frame(xid int32, zxid int64, body int) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(16+body))
	b = binary.BigEndian.AppendUint32(b, uint32(xid))
	b = binary.BigEndian.AppendUint64(b, uint64(zxid))
	b = binary.BigEndian.AppendUint32(b, 0)
	return append(b, make([]byte, body)...)
}

// A fencedConn follows go-zookeeper's reply stream however the reads cut it:
// the highest reply zxid is noted, a ping's included (see zkwire's
// LastZxid), the ConnectResponse's bytes and auth replies' zxids are not,
// and a body that looks like a header is skipped as a body.
func TestAZxidConnNotesTheHighestReplyZxidWhereverReadsCut(t *testing.T) {
	connect := binary.BigEndian.AppendUint32(nil, 36)
	connect = append(connect, make([]byte, 36)...)
	binary.BigEndian.PutUint64(connect[12:20], 0x7fff_0000) // the session id, where a zxid would be
	var stream []byte
	stream = append(stream, connect...)
	stream = append(stream, frame(1, 0x105, 40)...)
	stream = append(stream, frame(zkwire.XidPing, 0x108, 0)...)
	stream = append(stream, frame(zkwire.XidAuth, 0x901, 0)...)
	stream = append(stream, frame(-1, -1, 30)...) // a notification of 3.8
	body := frame(3, 0x800, 0)                    // a reply's bytes inside a body
	stream = append(stream, frame(2, 0x107, len(body))...)
	copy(stream[len(stream)-len(body):], body)
	stream = append(stream, frame(4, 0x106, 3)...) // lower: the highest stays
	// What go-zookeeper must read: the same stream, every reply's zxid 0.
	want := slices.Clone(stream)
	for off := len(connect); off < len(want); {
		clear(want[off+8 : off+16])
		size := int(binary.BigEndian.Uint32(want[off:]))
		off += 4 + size
	}
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		z := &fencedConn{f: newFence()}
		got := slices.Clone(stream)
		for rest := got; len(rest) > 0; {
			n := 1 + r.IntN(min(len(rest), 23))
			z.scan(rest[:n])
			rest = rest[n:]
		}
		if got := z.f.Zxid.Load(); got != 0x108 || z.lost {
			t.Fatalf("seed %d: noted %#x (lost %v), want 0x108, the ping's", seed, got, z.lost)
		}
		if own := z.f.ReplyZxid.Load(); own != 0x106 {
			t.Fatalf("seed %d: the last reply zxid %#x, want 0x106, the last reply's (as go-zookeeper keeps it)", seed, own)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("seed %d: go-zookeeper reads\n%x\nwant\n%x", seed, got, want)
		}
	}
}

// A setWatches re-send goes out with the relativeZxid the session's replies
// had reached when the connection was made, whatever go-zookeeper wrote
// (it is handed zeroes); a new session starts from 0; other requests and
// the caller's bytes are left as they were.
func TestAZxidConnWritesTheReSendsRelativeZxid(t *testing.T) {
	handshake := func(session int64) []byte {
		b := binary.BigEndian.AppendUint32(nil, 44)
		b = binary.BigEndian.AppendUint32(b, 0)
		b = binary.BigEndian.AppendUint64(b, 0)
		b = binary.BigEndian.AppendUint32(b, 2000)
		b = binary.BigEndian.AppendUint64(b, uint64(session))
		return append(b, make([]byte, 48-len(b))...)
	}
	request := func(op int32) []byte {
		b := binary.BigEndian.AppendUint32(nil, 4+4+8+12)
		b = binary.BigEndian.AppendUint32(b, 7)
		b = binary.BigEndian.AppendUint32(b, uint32(op))
		b = binary.BigEndian.AppendUint64(b, 0x5) // what go-zookeeper put there
		return append(b, make([]byte, 12)...)
	}
	tests := []struct {
		name    string
		session int64
		op      int32
		want    int64
	}{
		{"a resumed session's re-send", 0x77, OpSetWatches, 0x300},
		{"a new session's re-send", 0, OpSetWatches, 0},
		{"another request", 0x77, 4, 0x5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFence()
			f.ReplyZxid.Store(0x300)
			z, server := fencedPipe(t, f)
			sendThrough(t, z, server, handshake(tt.session))
			f.ReplyZxid.Store(0x400) // a reply of this connection: not what the re-send had seen
			p := request(tt.op)
			if w := int64(binary.BigEndian.Uint64(sendThrough(t, z, server, p)[12:20])); w != tt.want {
				t.Fatalf("on the wire %#x, want %#x", w, tt.want)
			}
			if own := int64(binary.BigEndian.Uint64(p[12:20])); own != 0x5 {
				t.Fatalf("the caller's request was changed to %#x", own)
			}
		})
	}
}

// The handshake's lastZxidSeen is raised to what the session saw, never
// lowered, and the caller's bytes are left as they were.
func TestAZxidConnRaisesTheHandshakesZxid(t *testing.T) {
	handshake := func(zxid int64) []byte {
		b := binary.BigEndian.AppendUint32(nil, 44)
		b = binary.BigEndian.AppendUint32(b, 0)
		b = binary.BigEndian.AppendUint64(b, uint64(zxid))
		return append(b, make([]byte, 44-12)...)
	}
	tests := []struct {
		name       string
		seen, own  int64
		wantOnWire int64
	}{
		{"a zxid the session saw is sent in place of go-zookeeper's 0", 0x200, 0, 0x200},
		{"go-zookeeper's own, when higher, stays", 0x200, 0x300, 0x300},
		{"nothing seen sends go-zookeeper's own", 0, 0x10, 0x10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFence()
			f.Zxid.Store(tt.seen)
			z, server := fencedPipe(t, f)
			p := handshake(tt.own)
			if w := int64(binary.BigEndian.Uint64(sendThrough(t, z, server, p)[8:16])); w != tt.wantOnWire {
				t.Fatalf("lastZxidSeen on the wire %#x, want %#x", w, tt.wantOnWire)
			}
			if own := int64(binary.BigEndian.Uint64(p[8:16])); own != tt.own {
				t.Fatalf("the caller's handshake was changed to %#x", own)
			}
		})
	}
}

// fencedPipe is a fenced connection over an in-memory pipe, and the
// server's end of it; both close when the test ends.
func fencedPipe(t *testing.T, f *Fence) (*fencedConn, net.Conn) {
	t.Helper()
	client, server := net.Pipe()
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return &fencedConn{Conn: client, f: f}, server
}

// sendThrough writes p through z, whole, and returns what the server read.
func sendThrough(t *testing.T, z *fencedConn, server net.Conn, p []byte) []byte {
	t.Helper()
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, len(p))
		_, _ = io.ReadFull(server, b)
		got <- b
	}()
	if n, err := z.Write(p); err != nil || n != len(p) {
		t.Fatalf("Write: %d, %v", n, err)
	}
	return <-got
}
