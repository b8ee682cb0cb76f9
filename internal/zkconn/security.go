// Package zkconn is gracekit's connection layer: every connection it opens
// to ZooKeeper is made by Dialer from one Options. It holds the order in
// which a client tries the ensemble's servers (HostProvider), the zxid
// fence of go-zookeeper's session (Fence), the watch session that sd's
// Instancers and Catalogs share (WatchSession), and the security every
// connection gets: TLS (crypto/tls, PEM files, client certificates re-read
// when their files change) and SASL DIGEST-MD5, which go-zookeeper v1.0.4
// lacks. The security works as a dialer wrapper (Layer.Wrap), so that
// go-zookeeper's session, sd's watch session and bulk reads
// (internal/zkwire) and the CLI all get it from one place, and it tells a
// connection the server refused for a setting (an unknown CA, a wrong
// password) from one that merely failed.
package zkconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Secret is a credential: every fmt verb prints it redacted, so that a
// config printed with %v or %+v, or logged, never shows it.
type Secret string

const redacted = "[redacted]"

func (Secret) String() string   { return redacted }
func (Secret) GoString() string { return `"` + redacted + `"` }

// Format redacts under every verb (%x and %q included).
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// MarshalText keeps the secret out of JSON and YAML dumps too.
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// TLS is the client side of ZooKeeper's secureClientPort.
type TLS struct {
	// CAFile is a PEM bundle of the CAs that signed the servers'
	// certificates (the server's ssl.trustStore is the client side's).
	// Empty: the system's roots.
	CAFile string
	// CertFile and KeyFile are the client's certificate (chain) and key,
	// PEM, for a server with ssl.clientAuth=need (its default). Both or
	// neither. They are re-read when either file changes, so a rotation
	// needs no restart: a connection keeps the certificate it opened with.
	CertFile, KeyFile string
	// ServerName is checked against the servers' certificates. Empty: the
	// host of each server's address (an IP address is checked against the
	// certificate's IP SANs).
	ServerName string
	// MinVersion is the lowest TLS version (tls.VersionTLS12, the default,
	// or tls.VersionTLS13).
	MinVersion uint16
}

// SASL is the DIGEST-MD5 login of a JAAS Server section's
// user_<User>="<Password>".
type SASL struct {
	User     string
	Password Secret
}

// Security is how a connection to ZooKeeper is secured; the zero value is
// plaintext without SASL.
type Security struct {
	TLS  *TLS
	SASL *SASL
}

// String describes the settings, without the password.
func (s Security) String() string {
	var parts []string
	if t := s.TLS; t != nil {
		parts = append(parts, fmt.Sprintf("tls(ca=%q cert=%q key=%q server-name=%q min=%s)", t.CAFile, t.CertFile, t.KeyFile, t.ServerName, VersionName(t.MinVersion)))
	}
	if s.SASL != nil {
		parts = append(parts, fmt.Sprintf("sasl(user=%q password=%s)", s.SASL.User, redacted))
	}
	if len(parts) == 0 {
		return "plaintext"
	}
	return strings.Join(parts, " ")
}

// GoString is String, so that %#v does not print the fields.
func (s Security) GoString() string { return s.String() }

// VersionName is "1.2" or "1.3" ("1.2" for 0, the default).
func VersionName(v uint16) string {
	switch v {
	case 0, tls.VersionTLS12:
		return "1.2"
	case tls.VersionTLS13:
		return "1.3"
	}
	return fmt.Sprintf("%#04x", v)
}

// ParseVersion reads "1.2" or "1.3" (a CLI flag's or an environment
// variable's value).
func ParseVersion(s string) (uint16, error) {
	switch strings.TrimSpace(s) {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("zkconn: TLS minimum version %q: want 1.2 or 1.3", s)
}

// ConfigError is a setting refused at construction; Field names it as
// sd, fxmodule and the CLI spell it (see names).
type ConfigError struct {
	Field string // e.g. "TLS CA file"
	Value string // a file name, never a credential
	Want  string // what to do
	Err   error
}

func (e *ConfigError) Error() string {
	s := fmt.Sprintf("zkconn: %s %q: %s", e.Field, e.Value, e.Want)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *ConfigError) Unwrap() error { return e.Err }

// Setting names, as every surface spells them, for errors that say what to
// change.
const (
	nameCA       = "the TLS CA (sd.TLSConfig.CAFile, GRACEKIT_ZK_TLS_CA, -tls-ca)"
	nameCert     = "the client certificate (sd.TLSConfig.CertFile/KeyFile, GRACEKIT_ZK_TLS_CERT/_KEY, -tls-cert/-tls-key)"
	nameServer   = "the TLS server name (sd.TLSConfig.ServerName, GRACEKIT_ZK_TLS_SERVER_NAME, -tls-server-name)"
	nameTLS      = "TLS (sd.TLS, GRACEKIT_ZK_TLS_*, -tls-*)"
	nameSASL     = "SASL (sd.SASL, GRACEKIT_ZK_SASL_USER/_PASSWORD, -sasl-user/-sasl-password)"
	namePassword = "the SASL password (sd.SASL, GRACEKIT_ZK_SASL_PASSWORD, -sasl-password)"
)

// Layer is a Security checked and ready to dial with. Its methods are safe
// for concurrent use.
type Layer struct {
	sec   Security
	tls   *tls.Config // nil without TLS
	certs *certFiles  // nil without a client certificate
	// resume holds TLS sessions to resume, per server address (see
	// serverCache): a Client opens more than one connection to a server
	// (its session, its watch session, a bulk read, every reconnect), and
	// a full handshake costs the server a signature and a key exchange
	// each. It is replaced when the client certificate changes, so that no
	// connection resumes a session made with the old one.
	resume atomic.Pointer[tlsCache]

	mu      sync.Mutex
	failure *Error          // the standing refusal, nil while none
	refusal chan struct{}   // closed, and replaced, at each refusal
	holds   map[string]held // per address: no dial before until
	hold    time.Duration
}

// New checks sec: files that are missing or malformed, or a client
// certificate that expired, are refused now, with an error naming the
// file and what to do, not at the first connection.
func New(sec Security) (*Layer, error) {
	l := &Layer{sec: sec, refusal: make(chan struct{}), holds: map[string]held{}, hold: DefaultHold}
	if s := sec.SASL; s != nil {
		if s.User == "" {
			return nil, &ConfigError{Field: "SASL user", Value: "", Want: "a user of the server's JAAS Server section (user_<name>=...)"}
		}
		if s.Password == "" {
			return nil, &ConfigError{Field: "SASL password for user", Value: s.User, Want: "set " + namePassword}
		}
	}
	t := sec.TLS
	if t == nil {
		return l, nil
	}
	conf := &tls.Config{MinVersion: t.MinVersion}
	switch t.MinVersion {
	case 0:
		conf.MinVersion = tls.VersionTLS12
	case tls.VersionTLS12, tls.VersionTLS13:
	default:
		return nil, &ConfigError{Field: "TLS minimum version", Value: VersionName(t.MinVersion), Want: "1.2 or 1.3"}
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, &ConfigError{Field: "TLS CA file", Value: t.CAFile, Want: "cannot be read; give a PEM bundle of the CA that signed the servers' certificates", Err: errors.Unwrap(err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &ConfigError{Field: "TLS CA file", Value: t.CAFile, Want: "holds no PEM certificate (-----BEGIN CERTIFICATE-----); give the CA that signed the servers' certificates"}
		}
		conf.RootCAs = pool
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		cf, err := loadCertFiles(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, err
		}
		l.certs = cf
		conf.GetClientCertificate = cf.get
	case t.CertFile != "" || t.KeyFile != "":
		return nil, &ConfigError{Field: "TLS client certificate and key", Value: t.CertFile + t.KeyFile, Want: "give both files (PEM certificate and its key), or neither"}
	}
	l.tls = conf
	l.resume.Store(&tlsCache{tls.NewLRUClientSessionCache(64)})
	return l, nil
}

// DefaultHold is how long a server that refused a connection for a setting
// is not dialled again: go-zookeeper redials a failed server every second,
// and a wrong password or an unknown CA does not get better by retrying.
const DefaultHold = 5 * time.Second

// Security is what l was made from.
func (l *Layer) Security() Security { return l.sec }

// Failure is the last refusal for a setting, nil when none stands: a
// connection that succeeds clears it.
func (l *Layer) Failure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failure == nil {
		return nil
	}
	return l.failure
}

func (l *Layer) refused(e *Error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holds[e.Server] = held{until: time.Now().Add(l.hold), err: e}
	l.failure = e
	close(l.refusal)
	l.refusal = make(chan struct{})
}

// Refusals is closed at the next refusal for a setting (ask again for the
// one after).
func (l *Layer) Refusals() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refusal
}

// AllHeld tells whether every one of addrs refused a connection for a
// setting within DefaultHold (false for none).
func (l *Layer) AllHeld(addrs []string) bool {
	if len(addrs) == 0 {
		return false
	}
	for _, a := range addrs {
		if l.heldBack(a) == nil {
			return false
		}
	}
	return true
}

func (l *Layer) succeeded(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.holds, addr)
	l.failure = nil
}

type held struct {
	until time.Time
	err   *Error
}

// heldBack is the refusal that keeps addr from being dialled now, else nil.
func (l *Layer) heldBack(addr string) *Error {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.holds[addr]
	if !ok || time.Now().After(h.until) {
		return nil
	}
	return h.err
}

// Presented is the client certificate the last TLS handshake presented,
// nil before one did.
func (l *Layer) Presented() *x509.Certificate {
	if l.certs == nil {
		return nil
	}
	l.certs.mu.Lock()
	defer l.certs.mu.Unlock()
	return l.certs.presented
}

type tlsCache struct{ tls.ClientSessionCache }

// serverCache is the Layer's session cache as one server's connections see
// it. crypto/tls keys a session by the server name it checked, which the
// members of an ensemble share when their certificates carry one name
// (TLS.ServerName) or they listen on one IP address; but a session is only
// good with the server that issued it, since each JVM keeps its own ticket
// keys. Keyed by name alone, a connection to one member offered another's
// ticket, got a full handshake, and replaced the ticket its neighbour's
// next connection wanted.
type serverCache struct {
	cache tls.ClientSessionCache
	addr  string
}

func (c serverCache) Get(key string) (*tls.ClientSessionState, bool) {
	return c.cache.Get(c.addr + " " + key)
}

func (c serverCache) Put(key string, cs *tls.ClientSessionState) {
	c.cache.Put(c.addr+" "+key, cs)
}

// sessionCache is the cache of TLS sessions to resume, a new one when the
// client certificate's files changed since the last handshake.
func (l *Layer) sessionCache() tls.ClientSessionCache {
	if l.certs != nil && l.certs.changed() {
		l.resume.Store(&tlsCache{tls.NewLRUClientSessionCache(64)})
	}
	return l.resume.Load().ClientSessionCache
}
