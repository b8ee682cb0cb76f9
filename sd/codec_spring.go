package sd

import (
	"encoding/binary"
	"math/bits"
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
//
// One pass, eight bytes at a time, finds the quote and checks the bytes
// before it: IndexByte and then plainASCII were two, and a fifth of the
// decoding.
func (s *scanner) text() ([]byte, bool) {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	rest := s.b[s.i:]
	i := 0
	for ; i+8 <= len(rest); i += 8 {
		x := binary.LittleEndian.Uint64(rest[i:])
		qs, bs := x^(ones*'"'), x^(ones*'\\')
		// The lowest flag of each mask is exact: a false one only follows
		// a true one (a borrow).
		quote := (qs - ones) &^ qs & highs
		bad := x&highs | (x-ones*0x20)&^x&highs | (bs-ones)&^bs&highs
		if quote != 0 {
			if bad&(quote&-quote-1) != 0 { // a bad byte before the quote
				return nil, false
			}
			end := i + bits.TrailingZeros64(quote)/8
			s.i += end
			return rest[:end], true
		}
		if bad != 0 {
			return nil, false
		}
	}
	for ; i < len(rest); i++ {
		switch c := rest[i]; {
		case c == '"':
			s.i += i
			return rest[:i], true
		case c < 0x20 || c >= 0x80 || c == '\\':
			return nil, false
		}
	}
	return nil, false
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
