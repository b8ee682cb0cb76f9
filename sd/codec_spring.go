package sd

import (
	"bytes"
	"encoding/binary"
)

// Curator writes a Spring instance with the same bytes around its values
// every time (testdata/curator/spring-instance.json): its keys in one
// order, no whitespace, Spring's payload class and uriSpec. scanSpring
// matches those bytes a literal at a time, where scanKeys reads and
// compares each key: half of a load's decoding went to the keys. Anything
// else gives up (ok false), and scanKeys reads the node as before; the two
// agree wherever scanSpring answers (FuzzSpringShapeMatchesScanKeys).
func scanSpring(data []byte) (v curatorView, ok bool) {
	s := scanner{b: data}
	if !s.lit(`{"name":"`) {
		return v, false
	}
	if v.name, ok = s.text(); !ok || !s.lit(`","id":"`) {
		return v, false
	}
	if v.id, ok = s.text(); !ok || !s.lit(`","address":"`) {
		return v, false
	}
	if v.address, ok = s.text(); !ok || !s.lit(`","port":`) {
		return v, false
	}
	if !s.optInt(&v.port) || !s.lit(`,"sslPort":`) || !s.optInt(&v.sslPort) ||
		!s.lit(`,"payload":{"@class":"`+SpringInstanceClass+`","id":"`) {
		return v, false
	}
	// The payload's own id and name: read, as scanKeys skips them, not kept.
	if _, ok = s.text(); !ok || !s.lit(`","name":"`) {
		return v, false
	}
	if _, ok = s.text(); !ok || !s.lit(`","metadata":`) {
		return v, false
	}
	start := s.i
	if !s.stringMap() {
		return v, false
	}
	v.meta = s.b[start:s.i]
	if !s.lit(`},"registrationTimeUTC":`) {
		return v, false
	}
	t, ok := s.int(64)
	if !ok || !s.lit(`,"serviceType":"`) {
		return v, false
	}
	v.regTime, v.hasRegTime = t, true
	if v.serviceType, ok = s.text(); !ok || !s.lit(`","uriSpec":`) || !s.lit(springURISpec) || !s.lit(`}`) {
		return v, false
	}
	v.uriSpec = defaultURISpec
	return v, s.i == len(s.b)
}

// text reads a string's bytes up to its closing quote, which it leaves for
// the literal that follows: plain ASCII only (no escape, no control byte),
// as str reads it; anything else gives up.
func (s *scanner) text() ([]byte, bool) {
	rest := s.b[s.i:]
	end := bytes.IndexByte(rest, '"')
	if end < 0 || !plainASCII(rest[:end]) {
		return nil, false
	}
	s.i += end
	return rest[:end], true
}

// stringMap reads {"k":"v",...} with plain keys and values and no
// whitespace, as Spring writes its metadata.
func (s *scanner) stringMap() bool {
	if !s.eat('{') {
		return false
	}
	if s.eat('}') {
		return true
	}
	for {
		if !s.eat('"') {
			return false
		}
		if _, ok := s.text(); !ok || !s.lit(`":"`) {
			return false
		}
		if _, ok := s.text(); !ok || !s.eat('"') {
			return false
		}
		if s.eat('}') {
			return true
		}
		if !s.eat(',') {
			return false
		}
	}
}

// plainASCII reports whether b holds only printable ASCII without a
// backslash, which a JSON string holds unchanged: eight bytes at a time,
// as a byte loop was most of a string's cost.
func plainASCII(b []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		bs := x ^ (ones * '\\')
		// A byte from 0x80 up, one below 0x20, or a backslash.
		if x&highs != 0 || (x-ones*0x20)&^x&highs != 0 || (bs-ones)&^bs&highs != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 || c >= 0x80 || c == '\\' {
			return false
		}
	}
	return true
}
