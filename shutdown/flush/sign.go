package flush

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Headers of a signed flush request, and of its answer.
const (
	HeaderTimestamp = "Gracekit-Timestamp"
	HeaderNonce     = "Gracekit-Nonce"
	HeaderSignature = "Gracekit-Signature"
	// HeaderResult carries the Result of an acknowledged flush.
	HeaderResult = "Gracekit-Flush-Result"
)

// MinSecretLen is the shortest accepted shared secret, in bytes.
const MinSecretLen = 16

// Self names the provider instance a Notifier speaks for: the instance it
// asks gateways to evict.
type Self struct {
	Service string
	ID      string
	Address string
	Port    int
}

// Request is the signed JSON body of a flush request: the instance to
// evict, the registration it ends and the gateway it is meant for. The
// signature covers all of it, so a request can only ever end that
// registration, at that gateway.
type Request struct {
	Service string `json:"service"`
	ID      string `json:"id"`
	Address string `json:"address"`
	Port    int    `json:"port"`
	// Czxid is the creation zxid of the instance's ZooKeeper node: the
	// registration that is stopping. A gateway evicts the instance only
	// while it lists that very registration, never a re-registration. The
	// Handler refuses a request without one (400).
	Czxid int64 `json:"czxid"`
	// Target is the audience: the flush URL the Notifier called, in the
	// form Audience returns. A Handler refuses a request whose target is
	// not one of its own audiences (401).
	Target string `json:"target"`
}

// request returns the Request that asks target to evict s's registration
// czxid.
func (s Self) request(czxid int64, target string) Request {
	return Request{Service: s.Service, ID: s.ID, Address: s.Address, Port: s.Port, Czxid: czxid, Target: target}
}

// Result says what a gateway did with an authenticated flush request. It is
// sent in the HeaderResult header of a 2xx answer; the Notifier counts every
// one of them as an acknowledgement.
type Result string

// Results of a flush request.
const (
	// Evicted: the instance left the gateway's view (status 200).
	Evicted Result = "evicted"
	// NotListed: the gateway lists no instance with that id; nothing
	// changed (status 202).
	NotListed Result = "not-listed"
	// OtherRegistration: the gateway lists the id, but from another
	// registration (another creation zxid, typically a restart); nothing
	// changed (status 202).
	OtherRegistration Result = "other-registration"
	// NotRouted: the gateway does not route the service; nothing changed
	// (status 202).
	NotRouted Result = "not-routed"
)

// status is the HTTP status a Handler answers r with.
func (r Result) status() int {
	if r == Evicted {
		return http.StatusOK
	}
	return http.StatusAccepted
}

func (r Result) valid() bool {
	switch r {
	case Evicted, NotListed, OtherRegistration, NotRouted:
		return true
	}
	return false
}

// Audience returns the form of a flush URL that flush requests name as
// their target: the URL with its scheme and host in lower case, without
// user information or fragment. The path and query stay as they are, so
// "http://gw/flush" and "http://gw/flush/" are two audiences. The URL must
// be an absolute http or https URL.
func Audience(rawURL string) (string, error) {
	if err := checkURL(rawURL); err != nil {
		return "", err
	}
	u, _ := url.Parse(rawURL) // checked
	c := url.URL{
		Scheme:   strings.ToLower(u.Scheme),
		Host:     strings.ToLower(u.Host),
		Path:     u.Path,
		RawPath:  u.RawPath,
		RawQuery: u.RawQuery,
	}
	return c.String(), nil
}

// Sign returns the hex HMAC-SHA256, keyed with secret, of
// timestamp + "\n" + nonce + "\n" + body.
func Sign(secret []byte, timestamp, nonce string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(timestamp))
	m.Write([]byte{'\n'})
	m.Write([]byte(nonce))
	m.Write([]byte{'\n'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// signHeaders sets a fresh timestamp, nonce and signature on h.
func signHeaders(h http.Header, secret, body []byte, now time.Time) {
	var raw [16]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails
	nonce := hex.EncodeToString(raw[:])
	ts := strconv.FormatInt(now.Unix(), 10)
	h.Set(HeaderTimestamp, ts)
	h.Set(HeaderNonce, nonce)
	h.Set(HeaderSignature, Sign(secret, ts, nonce, body))
}

func checkSecret(secret []byte) error {
	if len(secret) < MinSecretLen {
		return fmt.Errorf("flush: secret is %d bytes (minimum %d)", len(secret), MinSecretLen)
	}
	return nil
}
