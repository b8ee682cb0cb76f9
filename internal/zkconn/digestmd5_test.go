package zkconn

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// RFC 2831 section 4, example 1 (IMAP).
const (
	rfcChallenge = `realm="elwood.innosoft.com",nonce="OA6MG9tEQGm2hh",qop="auth",algorithm=md5-sess,charset=utf-8`
	rfcResponse  = "d388dad90d4bbd760a152321f2143af7"
	rfcRspauth   = "ea40f60335c427b5527b84dbabcdfffd"
)

func TestDigestMD5AgainstRFC2831Example(t *testing.T) {
	d := &digestMD5{user: "chris", password: "secret", uri: "imap/elwood.innosoft.com", cnonce: "OA6MHXh6VqTrRk"}
	got, err := d.respond([]byte(rfcChallenge))
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := parseDirectives(string(got))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"username": "chris", "realm": "elwood.innosoft.com", "nonce": "OA6MG9tEQGm2hh", "nc": "00000001",
		"cnonce": "OA6MHXh6VqTrRk", "digest-uri": "imap/elwood.innosoft.com", "response": rfcResponse, "qop": "auth", "charset": "utf-8",
	} {
		if dirs[k] != want {
			t.Errorf("%s = %q, want %q (response %s)", k, dirs[k], want, got)
		}
	}
	if err := d.verify([]byte("rspauth=" + rfcRspauth)); err != nil {
		t.Errorf("verify the RFC's rspauth: %v", err)
	}
	if err := d.verify([]byte("rspauth=00000000000000000000000000000000")); err == nil {
		t.Error("a wrong rspauth was accepted")
	}
}

func TestDigestMD5RefusesChallengesItCannotAnswer(t *testing.T) {
	tests := []struct {
		give, want string
	}{
		{give: `realm="r",qop="auth",algorithm=md5-sess`, want: "without a nonce"},
		{give: `nonce="n",qop="auth",algorithm=md5`, want: "algorithm"},
		{give: `nonce="n",qop="auth-conf",algorithm=md5-sess`, want: "without auth"},
		{give: `nonce="n`, want: "unterminated"},
	}
	for _, tt := range tests {
		d := &digestMD5{user: "u", password: "p", uri: saslURI}
		_, err := d.respond([]byte(tt.give))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("respond(%s) = %v, want an error with %q", tt.give, err, tt.want)
		}
	}
}

func TestDigestMD5QuotesAndEscapes(t *testing.T) {
	d, err := parseDirectives(`a="x\"y",b=plain, realm="r1",realm="r2"`)
	if err != nil {
		t.Fatal(err)
	}
	if d["a"] != `x"y` || d["b"] != "plain" {
		t.Errorf("parsed %q", d)
	}
}

func TestSecurityPrintsNoPassword(t *testing.T) {
	sec := Security{SASL: &SASL{User: "u", Password: "hunter2-pw"}, TLS: &TLS{CAFile: "/ca.pem"}}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
		for _, v := range []any{sec, *sec.SASL, sec.SASL.Password} {
			if s := fmt.Sprintf(verb, v); strings.Contains(s, "hunter2") || strings.Contains(s, fmt.Sprintf("%x", "hunter2")) {
				t.Errorf("%s of %T shows the password: %s", verb, v, s)
			}
		}
	}
	if b, _ := json.Marshal(sec); strings.Contains(string(b), "hunter2") {
		t.Errorf("JSON shows the password: %s", b)
	}
}
