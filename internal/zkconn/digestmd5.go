package zkconn

// DIGEST-MD5 (RFC 2831), the client side, as ZooKeeper's SASL needs it:
// qop "auth" only (no integrity or privacy layer), no authzid. It is
// written here because Go has no well-kept library for it (the mechanism
// is historic, RFC 6331, yet it is what ZooKeeper's JAAS DigestLoginModule
// speaks), and the part needed is two hashes and a parser.

import (
	"crypto/md5"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// digestMD5 is one client exchange.
type digestMD5 struct {
	user     string
	password string
	uri      string // digest-uri: "zookeeper/zk-sasl-md5"
	cnonce   string // set by tests; random otherwise

	rspauth string // what the server must answer, once response was made
}

// digestChallenge is a parsed digest-challenge.
type digestChallenge struct {
	realm, nonce, qop, charset, algorithm string
}

// parseDirectives reads a comma-separated list of name=value or
// name="quoted value" pairs (RFC 2831 section 7.1).
func parseDirectives(s string) (map[string]string, error) {
	out := map[string]string{}
	for i := 0; i < len(s); {
		for i < len(s) && (s[i] == ',' || s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i >= len(s) {
			break
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return nil, fmt.Errorf("directive without '=' at %q", s[i:])
		}
		name := strings.ToLower(strings.TrimSpace(s[i : i+eq]))
		i += eq + 1
		var val strings.Builder
		if i < len(s) && s[i] == '"' {
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New("unterminated quoted value")
			}
			i++ // the closing quote
		} else {
			end := strings.IndexByte(s[i:], ',')
			if end < 0 {
				end = len(s) - i
			}
			val.WriteString(strings.TrimSpace(s[i : i+end]))
			i += end
		}
		if _, dup := out[name]; !dup || name == "realm" {
			out[name] = val.String()
		}
	}
	return out, nil
}

func parseChallenge(b []byte) (digestChallenge, error) {
	d, err := parseDirectives(string(b))
	if err != nil {
		return digestChallenge{}, fmt.Errorf("DIGEST-MD5 challenge: %w", err)
	}
	c := digestChallenge{realm: d["realm"], nonce: d["nonce"], qop: d["qop"], charset: d["charset"], algorithm: d["algorithm"]}
	if c.nonce == "" {
		return c, errors.New("DIGEST-MD5 challenge without a nonce")
	}
	if c.algorithm != "md5-sess" {
		return c, fmt.Errorf("DIGEST-MD5 challenge with algorithm %q (want md5-sess)", c.algorithm)
	}
	if c.qop != "" && !containsToken(c.qop, "auth") {
		return c, fmt.Errorf("DIGEST-MD5 challenge offers qop %q, without auth", c.qop)
	}
	return c, nil
}

func containsToken(list, tok string) bool {
	for _, t := range strings.Split(list, ",") {
		if strings.TrimSpace(t) == tok {
			return true
		}
	}
	return false
}

// latin1 is s in ISO 8859-1 when every rune fits, as RFC 2831 asks of a
// client whose server did not say charset=utf-8; otherwise s itself.
func latin1(s string) string {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 0xff {
			return s
		}
		b = append(b, byte(r))
	}
	return string(b)
}

func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func h(s string) []byte {
	sum := md5.Sum([]byte(s))
	return sum[:]
}

func hexH(s string) string { return hex.EncodeToString(h(s)) }

// respond answers a digest-challenge with a digest-response.
func (d *digestMD5) respond(challenge []byte) ([]byte, error) {
	c, err := parseChallenge(challenge)
	if err != nil {
		return nil, err
	}
	if d.cnonce == "" {
		var b [24]byte
		_, _ = rand.Read(b[:])
		d.cnonce = base64.RawStdEncoding.EncodeToString(b[:])
	}
	user, pass, realm := d.user, d.password, c.realm
	if !strings.EqualFold(c.charset, "utf-8") {
		user, pass, realm = latin1(user), latin1(pass), latin1(realm)
	} else if !utf8.ValidString(user + pass) {
		return nil, errors.New("DIGEST-MD5: user or password is not valid UTF-8")
	}
	const nc, qop = "00000001", "auth"
	// A1 = H(user:realm:password):nonce:cnonce; the first part is bytes,
	// not hex.
	a1 := string(h(user+":"+realm+":"+pass)) + ":" + c.nonce + ":" + d.cnonce
	kd := func(k, s string) string { return hexH(k + ":" + s) }
	resp := kd(hexH(a1), c.nonce+":"+nc+":"+d.cnonce+":"+qop+":"+hexH("AUTHENTICATE:"+d.uri))
	d.rspauth = kd(hexH(a1), c.nonce+":"+nc+":"+d.cnonce+":"+qop+":"+hexH(":"+d.uri))

	var b strings.Builder
	if strings.EqualFold(c.charset, "utf-8") {
		b.WriteString("charset=utf-8,")
	}
	fmt.Fprintf(&b, "username=%s,", quote(d.user))
	if c.realm != "" {
		fmt.Fprintf(&b, "realm=%s,", quote(c.realm))
	}
	fmt.Fprintf(&b, "nonce=%s,nc=%s,cnonce=%s,digest-uri=%s,maxbuf=65536,response=%s,qop=%s",
		quote(c.nonce), nc, quote(d.cnonce), quote(d.uri), resp, qop)
	return []byte(b.String()), nil
}

// verify checks the server's response-auth, which proves it knew the
// password too.
func (d *digestMD5) verify(final []byte) error {
	dirs, err := parseDirectives(string(final))
	if err != nil {
		return fmt.Errorf("DIGEST-MD5 response-auth: %w", err)
	}
	got := dirs["rspauth"]
	if got == "" || d.rspauth == "" || subtle.ConstantTimeCompare([]byte(got), []byte(d.rspauth)) != 1 {
		return errors.New("DIGEST-MD5: the server's response-auth does not match: it does not know the password")
	}
	return nil
}
