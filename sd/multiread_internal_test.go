package sd

import (
	"encoding/binary"
	"testing"
)

// A reply cut anywhere is an error, never a panic or a short result.
func TestParseMultiReadRefusesTruncatedReplies(t *testing.T) {
	reply := binary.BigEndian.AppendUint32(nil, 7)  // xid
	reply = binary.BigEndian.AppendUint64(reply, 9) // zxid
	reply = binary.BigEndian.AppendUint32(reply, 0) // err
	// one getData result: header, data "hi", stat
	reply = binary.BigEndian.AppendUint32(reply, opGetData)
	reply = append(reply, 0)
	reply = binary.BigEndian.AppendUint32(reply, 0)
	reply = binary.BigEndian.AppendUint32(reply, 2)
	reply = append(reply, "hi"...)
	stat := make([]byte, statLen)
	binary.BigEndian.PutUint64(stat[0:8], 42) // czxid
	reply = append(reply, stat...)
	// one error result (node gone)
	reply = binary.BigEndian.AppendUint32(reply, 0xFFFFFFFF)
	reply = append(reply, 0)
	reply = binary.BigEndian.AppendUint32(reply, uint32(0xFFFFFF9B)) // -101
	reply = binary.BigEndian.AppendUint32(reply, uint32(0xFFFFFF9B))
	// done
	reply = binary.BigEndian.AppendUint32(reply, 0xFFFFFFFF)
	reply = append(reply, 1)
	reply = binary.BigEndian.AppendUint32(reply, 0xFFFFFFFF)

	got, err := parseMultiRead(7, reply)
	if err != nil || len(got) != 2 || string(got[0].data) != "hi" || got[0].stat.Czxid != 42 || !got[0].ok || got[1].ok {
		t.Fatalf("parseMultiRead = %+v, %v", got, err)
	}
	if _, err := parseMultiRead(8, reply); err == nil {
		t.Fatal("a reply to another request was accepted")
	}
	for n := range len(reply) {
		if _, err := parseMultiRead(7, reply[:n]); err == nil {
			t.Fatalf("a reply cut at %d of %d bytes was accepted", n, len(reply))
		}
	}
}
