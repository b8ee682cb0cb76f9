package main

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// Packets captured between go-zookeeper v1.0.4 and ZooKeeper 3.8 (a
// tapped loopback proxy): the handshake, then exists /s (NONODE),
// createContainer /s, create /s/a, setData /s/a, delete /s/a, close.
var (
	capturedRequests = []string{
		"0000002c00000000000000000000000000000fa000000000000000000000001000000000000000000000000000000000",                 // ConnectRequest
		"0000000f0000000100000003000000022f7300",                                                                           // exists /s
		"000000310000000200000013000000022f73ffffffff000000010000001f00000005776f726c6400000006616e796f6e6500000004",       // createContainer /s
		"000000340000000300000001000000042f732f610000000178000000010000001f00000005776f726c6400000006616e796f6e6500000001", // create /s/a
		"000000190000000400000005000000042f732f61000000017900000000",                                                       // setData /s/a
		"000000140000000500000002000000042f732f61ffffffff",                                                                 // delete /s/a
		"0000000800000006fffffff5", // closeSession
	}
	capturedReplies = []string{
		"000000240000000000000fa0010000244a720000000000103c5efc41193903897a91b8348ad563c3", // ConnectResponse, session 0x10000244a720000
		"00000010000000010000000000000001ffffff9b",                                         // exists: NONODE (-101)
		"0000005a00000002000000000000000200000000000000022f7300000000000000020000000000000002000001a24a29eaf6000001a24a29eaf6000000000000000000000000000000000000000000000000000000000000000000000002",
		"0000001800000003000000000000000300000000000000042f732f61",
		"000000540000000400000000000000040000000000000000000000030000000000000004000001a24a29eb68000001a24a29ebd5000000010000000000000000010000244a72000000000001000000000000000000000003",
		"0000001000000005000000000000000500000000",
		"0000001000000006000000000000000600000000",
	}
)

func unhex(t *testing.T, ss []string) [][]byte {
	t.Helper()
	out := make([][]byte, len(ss))
	for i, s := range ss {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

// feedAll feeds stream to a framer in chunks of size n and returns its
// packets and raw bytes.
func feedAll(stream []byte, n int) (f *framer, packets [][]byte, raw []byte) {
	f = &framer{}
	for len(stream) > 0 {
		k := min(n, len(stream))
		p, r := f.feed(stream[:k])
		packets, raw = append(packets, p...), append(raw, r...)
		stream = stream[k:]
	}
	return f, packets, raw
}

// However TCP cuts the stream (a byte at a time, mid-header, several
// packets in one read), the framer gives back the packets as sent.
func TestFramerSplitsCapturedStreamsAtAnyChunking(t *testing.T) {
	for _, dir := range []struct {
		name    string
		packets [][]byte
	}{{"requests", unhex(t, capturedRequests)}, {"replies", unhex(t, capturedReplies)}} {
		stream := bytes.Join(dir.packets, nil)
		for _, n := range []int{1, 3, 7, 16, 21, 64, len(stream)} {
			f, got, raw := feedAll(stream, n)
			if len(raw) != 0 || f.broken {
				t.Fatalf("%s in chunks of %d: the framer gave up (%d raw bytes)", dir.name, n, len(raw))
			}
			if len(got) != len(dir.packets) {
				t.Fatalf("%s in chunks of %d: %d packets, want %d", dir.name, n, len(got), len(dir.packets))
			}
			for i := range got {
				if !bytes.Equal(got[i], dir.packets[i]) {
					t.Errorf("%s in chunks of %d: packet %d is %x, want %x", dir.name, n, i, got[i], dir.packets[i])
				}
			}
			if f.seen != len(dir.packets) {
				t.Errorf("%s: seen %d, want %d", dir.name, f.seen, len(dir.packets))
			}
		}
	}
}

func TestHeadersOfCapturedPackets(t *testing.T) {
	reqs, reps := unhex(t, capturedRequests), unhex(t, capturedReplies)
	wantOps := []int32{zkOps["exists"], zkOps["createContainer"], zkOps["create"], zkOps["setData"], zkOps["delete"], -11}
	for i, p := range reqs[1:] {
		xid, op, ok := requestHeader(p)
		if !ok || xid != int32(i+1) || op != wantOps[i] {
			t.Errorf("request %d: xid %d op %d ok %v, want xid %d op %d (%s)", i+1, xid, op, ok, i+1, wantOps[i], opName(wantOps[i]))
		}
	}
	for i, p := range reps[1:] {
		xid, zxid, code, ok := replyHeader(p)
		if !ok || xid != int32(i+1) {
			t.Errorf("reply %d: xid %d ok %v, want xid %d", i+1, xid, ok, i+1)
		}
		wantCode := int32(0)
		if i == 0 {
			wantCode = -101 // exists /s: NONODE
		}
		if code != wantCode || zxid <= 0 {
			t.Errorf("reply %d: zxid %d code %d, want a zxid and code %d", i+1, zxid, code, wantCode)
		}
	}
	if got := connectSession(reps[0]); got != 0x10000244a720000 {
		t.Errorf("the handshake's session is 0x%x, want 0x10000244a720000", got)
	}
	if _, _, ok := requestHeader([]byte{0, 0, 0, 4, 0, 0, 0, 1}); ok {
		t.Error("a packet of 4 bytes has no request header, but requestHeader said ok")
	}
	if _, _, _, ok := replyHeader(reqs[1][:16]); ok {
		t.Error("16 bytes have no reply header, but replyHeader said ok")
	}
}

// A length no ZooKeeper packet has (a stream that is not ZooKeeper's)
// stops the parsing: the bytes pass on as they came, never held back.
func TestFramerGivesUpOnAnUnbelievableLength(t *testing.T) {
	f := &framer{}
	junk := []byte("GET / HTTP/1.1\r\n")
	p, raw := f.feed(junk)
	if len(p) != 0 || !bytes.Equal(raw, junk) || !f.broken {
		t.Fatalf("packets %d raw %q broken %v: want the bytes back raw and the framer broken", len(p), raw, f.broken)
	}
	if _, raw := f.feed([]byte("more")); string(raw) != "more" {
		t.Errorf("after giving up, feed gave %q, want the bytes as they came", raw)
	}
}

func TestOpNamesRoundTrip(t *testing.T) {
	for _, name := range opNames() {
		if got := opName(zkOps[name]); got != name {
			t.Errorf("opName(%d) = %q, want %q", zkOps[name], got, name)
		}
	}
	if got := opName(77); got != "op77" {
		t.Errorf("opName(77) = %q, want op77", got)
	}
}
