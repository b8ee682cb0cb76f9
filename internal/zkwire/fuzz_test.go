package zkwire

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"
)

// The decoders take what a server sent: a hostile or truncated reply is an
// error, never a panic or an allocation larger than the reply.

func FuzzParseConnectResponse(f *testing.F) {
	f.Add(binary.BigEndian.AppendUint32(make([]byte, 16), 16))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0x0f, 0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseConnectResponse(b)
		if err == nil && len(r.Passwd) > len(b) {
			t.Fatal("password longer than the reply")
		}
	})
}

func FuzzParseNotification(f *testing.F) {
	ev := binary.BigEndian.AppendUint32(nil, 0xffffffff)
	ev = binary.BigEndian.AppendUint64(ev, 0xffffffffffffffff)
	ev = binary.BigEndian.AppendUint32(ev, 0)
	ev = binary.BigEndian.AppendUint32(ev, EventNodeCreated)
	ev = binary.BigEndian.AppendUint32(ev, 3)
	f.Add(appendString(ev, "/services/a/b"))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, body, err := ParseReplyHeader(b)
		if err != nil {
			return
		}
		if ev, err := ParseWatcherEvent(body); err == nil && len(ev.Path) > len(body) {
			t.Fatal("path longer than the frame")
		}
	})
}

func FuzzParseChildren(f *testing.F) {
	f.Add(appendString(appendString(binary.BigEndian.AppendUint32(nil, 2), "a"), "b"))
	f.Add(binary.BigEndian.AppendUint32(nil, 0x7fffffff))
	f.Add(binary.BigEndian.AppendUint32(nil, 0xffffffff))
	f.Fuzz(func(t *testing.T, b []byte) {
		names, err := ParseChildren(b)
		if err == nil && len(names) > len(b)/4 {
			t.Fatalf("%d names from %d bytes", len(names), len(b))
		}
	})
}

func FuzzParseGetData(f *testing.F) {
	f.Add(append(appendString(nil, "data"), make([]byte, StatBytes)...))
	f.Add(append(binary.BigEndian.AppendUint32(nil, 0xffffffff), make([]byte, StatBytes)...))
	f.Add(binary.BigEndian.AppendUint32(nil, 0x7fffffff))
	f.Fuzz(func(t *testing.T, b []byte) {
		data, _, err := ParseGetData(b)
		if err == nil && len(data) > len(b) {
			t.Fatal("data longer than the reply")
		}
	})
}

// multiResults are pieces of a multiRead reply: one node read ("{}"), one
// node's error (NoNode), and the closing header.
func multiResults() (ok, bad, end []byte) {
	ok = binary.BigEndian.AppendUint32(nil, OpGetData)
	ok = append(ok, 0, 0, 0, 0, 0)
	ok = append(appendString(ok, "{}"), make([]byte, StatBytes)...)
	bad = binary.BigEndian.AppendUint32(nil, 0xffffffff)
	bad = append(bad, 0, 0, 0, 0, 0)
	bad = binary.BigEndian.AppendUint32(bad, 0xffffff9b) // -101
	end = binary.BigEndian.AppendUint32(nil, 0xffffffff)
	return ok, bad, append(end, 1, 0xff, 0xff, 0xff, 0xff)
}

func FuzzParseMultiGetData(f *testing.F) {
	ok, bad, end := multiResults()
	f.Add(append(append(ok, bad...), end...))
	f.Add(end)
	f.Add(ok)
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := ParseMultiGetData(b)
		if err == nil && len(res)*(multiHdrSize+4) > len(b) {
			t.Fatalf("%d results from %d bytes", len(res), len(b))
		}
	})
}

// A reply cut anywhere is an error, never a panic or a short result; a
// whole one gives each node's data and stat, or its own error.
func TestParseMultiGetDataRefusesTruncatedReplies(t *testing.T) {
	ok, bad, end := multiResults()
	binary.BigEndian.PutUint64(ok[len(ok)-StatBytes:], 42) // czxid
	reply := append(append(ok, bad...), end...)
	got, err := ParseMultiGetData(reply)
	if err != nil || len(got) != 2 || string(got[0].Data) != "{}" || got[0].Stat.Czxid != 42 || got[0].Err != 0 || got[1].Err != CodeNoNode {
		t.Fatalf("ParseMultiGetData = %+v, %v", got, err)
	}
	for n := range len(reply) {
		if _, err := ParseMultiGetData(reply[:n]); err == nil {
			t.Fatalf("a reply cut at %d of %d bytes was accepted", n, len(reply))
		}
	}
}

// A reply with more results than its batch was sized for grows into a
// copy and never writes past the batch: the caller (sd's bulk read) parses
// a batch in place, in the slice that holds the next one.
func TestAppendMultiGetDataStaysInItsBatch(t *testing.T) {
	one, _, end := multiResults()
	reads := make([]Read, 3)
	reads[2].Err = 7 // the next batch's
	res, err := AppendMultiGetData(reads[0:0:2], append(bytes.Repeat(one, 3), end...))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || reads[2].Err != 7 {
		t.Fatalf("%d results; the next batch's read is now %+v", len(res), reads[2])
	}
	res, err = AppendMultiGetData(reads[0:0:2], append(bytes.Repeat(one, 2), end...))
	if err != nil || len(res) != 2 || &res[0] != &reads[0] {
		t.Fatalf("a reply of the batch's size was not parsed in place: %d results, %v", len(res), err)
	}
}

// FuzzConnAgainstAHostileServer: whatever a server answers to the
// handshake and to a request, Dial and Do return, by the deadline at the
// latest, without a panic.
func FuzzConnAgainstAHostileServer(f *testing.F) {
	hs := binary.BigEndian.AppendUint32(nil, 0)
	hs = binary.BigEndian.AppendUint32(hs, 4000)
	hs = binary.BigEndian.AppendUint64(hs, 1)
	hs = binary.BigEndian.AppendUint32(hs, 16)
	hs = append(hs, make([]byte, 16)...)
	reply := binary.BigEndian.AppendUint32(nil, 1)
	reply = append(reply, make([]byte, 12)...)
	f.Add(hs, reply)
	f.Add(hs, []byte{0, 0, 0})
	f.Add([]byte{0xff}, []byte(nil))
	f.Fuzz(func(t *testing.T, handshake, answer []byte) {
		client, server := net.Pipe()
		defer server.Close()
		go func() {
			_, _ = ReadFrame(server)
			_ = WriteFrame(server, handshake)
			_, _ = ReadFrame(server)
			_ = WriteFrame(server, answer)
			_, _ = server.Write(answer) // and the same, unframed
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		conn, err := Dial(ctx, Config{
			Addr:           "pipe",
			Dial:           func(string, string, time.Duration) (net.Conn, error) { return client, nil },
			SessionTimeout: 300 * time.Millisecond,
			OnEvent:        func(uint64, WatcherEvent) {},
		})
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = conn.Do(ctx, OpGetData, GetDataBody("/a"))
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("took %v against a 300ms deadline", d)
		}
	})
}
