package shutdown

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Headers of a signed flush request.
const (
	HeaderTimestamp = "Gracekit-Timestamp"
	HeaderNonce     = "Gracekit-Nonce"
	HeaderSignature = "Gracekit-Signature"
)

// MinSecretLen is the shortest accepted shared secret, in bytes.
const MinSecretLen = 16

// Instance names the provider instance to evict. It is the JSON body of a
// flush request.
type Instance struct {
	Service string `json:"service"`
	ID      string `json:"id"`
	Address string `json:"address"`
	Port    int    `json:"port"`
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
		return fmt.Errorf("shutdown: secret is %d bytes (minimum %d)", len(secret), MinSecretLen)
	}
	return nil
}
