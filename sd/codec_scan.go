package sd

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// A reader of Curator JSON without reflection: encoding/json's full decode
// cost about 10 µs a node, more than reading the node from ZooKeeper.
//
// Written by hand rather than with a fast JSON library (fastjson, gjson,
// jsonparser): those decide on duplicate keys, keys in another case and
// invalid UTF-8 unlike encoding/json, so they would still need this
// shape-checking on top, and the module would carry a dependency for a few
// hundred lines. The scanner reads only the plain shape Curator and Spring
// write (known keys once, in the right case; strings without escapes;
// integers; unknown values skipped after a check) and gives up (ok false)
// at anything else, which encoding/json then reads: its answers stay the
// reference, and FuzzCuratorScanMatchesEncodingJSON holds the two equal.

// scanner walks data from i.
type scanner struct {
	b     []byte
	i     int
	ascii bool // the last string str read was ASCII
}

// maxSkipDepth bounds the nesting of a skipped value; deeper ones go to
// encoding/json, whose own limit then applies to the whole document.
const maxSkipDepth = 1000

// springURISpec is DefaultURISpec as Curator writes it.
const springURISpec = `{"parts":[{"value":"scheme","variable":true},{"value":"://","variable":false},` +
	`{"value":"address","variable":true},{"value":":","variable":false},{"value":"port","variable":true}]}`

var (
	curatorKnown = []string{"name", "id", "address", "port", "sslPort", "payload", "registrationTimeUTC", "serviceType", "uriSpec"}
	payloadKnown = []string{"@class", "metadata"}
	specKnown    = []string{"parts"}
	partKnown    = []string{"value", "variable"}
)

// scanCurator reads data as scanner says above. A uriSpec other than
// Spring's (which is defaultURISpec) is rebuilt in a buffer of its own.
// defaultURISpec is DefaultURISpec as the uriSpec of a view.
var defaultURISpec = []byte(DefaultURISpec)

func scanCurator(data []byte) (curatorView, bool) {
	if v, ok := scanSpring(data); ok {
		return v, true
	}
	return scanKeys(data)
}

// scanKeys reads data key by key, in any order, with any whitespace.
func scanKeys(data []byte) (curatorView, bool) {
	var v curatorView
	s := scanner{b: data}
	ok := s.object(curatorKnown, func(f int, _ []byte) bool {
		switch f {
		case 0:
			return s.optString(&v.name)
		case 1:
			return s.optString(&v.id)
		case 2:
			return s.optString(&v.address)
		case 3:
			return s.optInt(&v.port)
		case 4:
			return s.optInt(&v.sslPort)
		case 5:
			return s.payload(&v)
		case 6:
			if s.null() {
				return true
			}
			t, ok := s.int(64)
			v.regTime, v.hasRegTime = t, true
			return ok
		case 7:
			return s.optString(&v.serviceType)
		case 8:
			if s.lit(springURISpec) {
				// What Spring writes, every time: no need to walk it.
				v.uriSpec = defaultURISpec // shared, never written to
				return true
			}
			return s.uriSpec(&v, nil)
		}
		return s.skip()
	})
	s.ws()
	return v, ok && s.i == len(s.b)
}

// object reads an object whose known keys come at most once and in their
// own case, calling value at each value with the key's index in known (-1
// for an unknown key) and the key.
func (s *scanner) object(known []string, value func(f int, key []byte) bool) bool {
	s.ws()
	if !s.eat('{') {
		return false
	}
	s.ws()
	if s.eat('}') {
		return true
	}
	var seen uint64
	for {
		s.ws()
		key, ok := s.str()
		if !ok {
			return false
		}
		f := -1
		for j, k := range known {
			if string(key) == k {
				f = j
				break
			}
		}
		if f < 0 {
			// No two known keys fold to each other, so a key that matched
			// one exactly folds to no other: only the rest are checked.
			for _, k := range known {
				// ASCII folds only to the same length; other runes may not.
				if (len(key) == len(k) || !s.ascii) && bytes.EqualFold(key, []byte(k)) {
					return false // encoding/json folds case: let it choose
				}
			}
		}
		if f >= 0 {
			if seen&(1<<f) != 0 {
				return false // a duplicate: encoding/json merges them
			}
			seen |= 1 << f
		}
		s.ws()
		if !s.eat(':') {
			return false
		}
		s.ws()
		if !value(f, key) {
			return false
		}
		s.ws()
		if s.eat(',') {
			continue
		}
		return s.eat('}')
	}
}

func (s *scanner) payload(v *curatorView) bool {
	if s.null() {
		return true
	}
	var class, meta []byte
	hasClass := false
	ok := s.object(payloadKnown, func(f int, _ []byte) bool {
		switch f {
		case 0:
			if s.null() {
				return true
			}
			hasClass = true
			return s.optString(&class)
		case 1:
			// Most metadata is an object of plain strings, which walking
			// checks as well as json.Valid would; anything else is skipped.
			start := s.i
			if !s.object(nil, func(int, []byte) bool { _, ok := s.str(); return ok }) {
				s.i = start
				if !s.skip() {
					return false
				}
			}
			meta = s.b[start:s.i]
			return true
		}
		return s.skip()
	})
	if ok && hasClass && string(class) == SpringInstanceClass && len(meta) > 0 && string(meta) != "null" {
		v.meta = meta
	}
	return ok
}

// uriSpec rebuilds the spec's text in buf, the way uriSpec.String does.
func (s *scanner) uriSpec(v *curatorView, buf []byte) bool {
	if s.null() {
		return true
	}
	ok := s.object(specKnown, func(f int, _ []byte) bool {
		if f < 0 {
			return s.skip()
		}
		if s.null() {
			return true
		}
		if !s.eat('[') {
			return false
		}
		s.ws()
		if s.eat(']') {
			return true
		}
		for {
			s.ws()
			if !s.null() {
				var value []byte
				variable := false
				if !s.object(partKnown, func(f int, _ []byte) bool {
					switch f {
					case 0:
						return s.optString(&value)
					case 1:
						return s.optBool(&variable)
					}
					return s.skip()
				}) {
					return false
				}
				if variable {
					buf = append(buf, '{')
					buf = append(buf, value...)
					buf = append(buf, '}')
				} else {
					buf = append(buf, value...)
				}
			}
			s.ws()
			if s.eat(',') {
				continue
			}
			return s.eat(']')
		}
	})
	v.uriSpec = buf
	return ok
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) lit(word string) bool {
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// null reads a null. encoding/json leaves a field alone on null, which
// here is the field unset, since no known key comes twice.
func (s *scanner) null() bool { return s.lit("null") }

// str reads a string without escapes, in valid UTF-8, and returns its
// bytes, which encoding/json would return unchanged.
func (s *scanner) str() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	if v, ok := s.text(); ok { // plain ASCII, nearly every string
		s.i, s.ascii = s.i+1, true
		return v, true
	}
	// IndexByte finds the end a word at a time: the byte loop that did
	// was a quarter of a load's decoding.
	rest := s.b[s.i:]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return nil, false
	}
	v := rest[:end]
	if bytes.IndexByte(v, '\\') >= 0 {
		return nil, false
	}
	ascii := true
	for _, c := range v {
		if c-0x20 >= 0x60 { // below 0x20 or above 0x7f
			if c < 0x20 {
				return nil, false
			}
			ascii = false
		}
	}
	if !ascii && !utf8.Valid(v) {
		return nil, false
	}
	s.i, s.ascii = s.i+end+1, ascii
	return v, true
}

func (s *scanner) optString(dst *[]byte) bool {
	if s.null() {
		return true
	}
	v, ok := s.str()
	*dst = v
	return ok
}

func (s *scanner) optBool(dst *bool) bool {
	switch {
	case s.null():
		return true
	case s.lit("true"):
		*dst = true
		return true
	case s.lit("false"):
		*dst = false
		return true
	}
	return false
}

func (s *scanner) optInt(dst *int) bool {
	if s.null() {
		return true
	}
	n, ok := s.int(strconv.IntSize)
	*dst = int(n)
	return ok
}

// int reads an integer in JSON's form (no fraction, no exponent) that fits
// bits, as encoding/json reads one into an int of that size.
func (s *scanner) int(bits int) (int64, bool) {
	neg := s.eat('-')
	start := s.i
	var n uint64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		d := uint64(s.b[s.i] - '0')
		// 19 digits fit in a uint64: only a longer number can overflow.
		if s.i-start >= 19 && n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
		s.i++
	}
	digits := s.i - start
	if digits == 0 || (s.b[start] == '0' && digits > 1) {
		return 0, false
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			return 0, false // a float: encoding/json refuses it for an int, with its own message
		}
	}
	limit := uint64(1)<<(bits-1) - 1
	if neg {
		limit++
	}
	if n > limit {
		return 0, false
	}
	if neg {
		return -int64(n), true // n == 1<<63 wraps to MinInt64, as wanted
	}
	return int64(n), true
}

// skip passes over any value, checked to be valid JSON.
func (s *scanner) skip() bool {
	if s.i >= len(s.b) {
		return false
	}
	start := s.i
	switch s.b[s.i] {
	case '"':
		return s.skipString()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if !s.skipString() {
					return false
				}
				continue
			case '{', '[':
				depth++
				if depth > maxSkipDepth {
					return false
				}
			case '}', ']':
				depth--
			}
			s.i++
			if depth == 0 {
				return json.Valid(s.b[start:s.i])
			}
		}
		return false
	}
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r', ',', '}', ']':
			return s.i > start && json.Valid(s.b[start:s.i])
		}
		s.i++
	}
	return false
}

// skipString passes over a string, checking its escapes as JSON's grammar
// does (any other byte from 0x20 up is allowed, as encoding/json allows it).
func (s *scanner) skipString() bool {
	if !s.eat('"') {
		return false
	}
	for s.i < len(s.b) {
		c := s.b[s.i]
		s.i++
		switch {
		case c == '"':
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if s.i >= len(s.b) {
				return false
			}
			e := s.b[s.i]
			s.i++
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(s.b)-s.i < 4 {
					return false
				}
				for _, h := range s.b[s.i : s.i+4] {
					if !isHex(h) {
						return false
					}
				}
				s.i += 4
			default:
				return false
			}
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// scanStringMap reads a JSON object of plain strings (as str reads them)
// that is all of raw; a later duplicate key wins, as in encoding/json.
func scanStringMap(raw []byte) (map[string]string, bool) {
	s := scanner{b: raw}
	m := map[string]string{}
	ok := s.object(nil, func(_ int, key []byte) bool {
		v, ok := s.str()
		if ok {
			m[string(key)] = string(v)
		}
		return ok
	})
	s.ws()
	return m, ok && s.i == len(s.b)
}
