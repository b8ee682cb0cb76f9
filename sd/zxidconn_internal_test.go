package sd

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/gracekit/gracekit/internal/zkwire"
)

// frame is a reply frame: length, xid, zxid, err and a body.
func frame(xid int32, zxid int64, body int) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(16+body))
	b = binary.BigEndian.AppendUint32(b, uint32(xid))
	b = binary.BigEndian.AppendUint64(b, uint64(zxid))
	b = binary.BigEndian.AppendUint32(b, 0)
	return append(b, make([]byte, body)...)
}

// A zxidConn follows go-zookeeper's reply stream however the reads cut it:
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
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		z := &zxidConn{c: &Client{}}
		for rest := stream; len(rest) > 0; {
			n := 1 + r.IntN(min(len(rest), 23))
			z.scan(rest[:n])
			rest = rest[n:]
		}
		if got := z.c.zxid.Load(); got != 0x108 || z.lost {
			t.Fatalf("seed %d: noted %#x (lost %v), want 0x108, the ping's", seed, got, z.lost)
		}
	}
}

// The handshake's lastZxidSeen is raised to what the Client saw, never
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
		{"a zxid the Client saw is sent in place of go-zookeeper's 0", 0x200, 0, 0x200},
		{"go-zookeeper's own, when higher, stays", 0x200, 0x300, 0x300},
		{"nothing seen sends go-zookeeper's own", 0, 0x10, 0x10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			defer server.Close()
			cl := &Client{}
			cl.zxid.Store(tt.seen)
			z := &zxidConn{Conn: client, c: cl}
			p := handshake(tt.own)
			got := make(chan int64, 1)
			go func() {
				b := make([]byte, len(p))
				n := 0
				for n < len(b) {
					k, err := server.Read(b[n:])
					if err != nil {
						break
					}
					n += k
				}
				got <- int64(binary.BigEndian.Uint64(b[8:16]))
			}()
			if n, err := z.Write(p); err != nil || n != len(p) {
				t.Fatalf("Write: %d, %v", n, err)
			}
			if w := <-got; w != tt.wantOnWire {
				t.Fatalf("lastZxidSeen on the wire %#x, want %#x", w, tt.wantOnWire)
			}
			if own := int64(binary.BigEndian.Uint64(p[8:16])); own != tt.own {
				t.Fatalf("the caller's handshake was changed to %#x", own)
			}
		})
	}
}
