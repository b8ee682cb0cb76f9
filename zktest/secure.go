package zktest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// TLS serves clients over TLS too, on each member's SecureClientPort, with
// pki's server certificate, and requires a client certificate signed by its
// CA (ssl.clientAuth=need): the Netty connection factory, PEM key and trust
// stores, and the X.509 auth provider. The plaintext ClientPort stays open
// for the harness's own four-letter words; a test of a TLS-only ensemble
// connects to SecureAddr.
func TLS(pki *PKI) Option {
	return optionFunc(func(o *options) error {
		if pki == nil {
			return fmt.Errorf("zktest: TLS(nil): want a PKI from NewPKI")
		}
		o.pki = pki
		return nil
	})
}

// SASL requires every session to authenticate with SASL DIGEST-MD5 as one
// of users (name to password): the SASL auth provider,
// sessionRequireClientSASLAuth=true and a JAAS Server section.
func SASL(users map[string]string) Option {
	return optionFunc(func(o *options) error {
		if len(users) == 0 {
			return fmt.Errorf("zktest: SASL needs at least one user")
		}
		o.saslUsers = users
		return nil
	})
}

// SecureAddr is the server's TLS address, "127.0.0.1:port" (the TLS
// option), or "" without TLS.
func (s *Server) SecureAddr() string {
	if s.SecureClientPort == 0 {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.SecureClientPort))
}

// SecureConnectString lists the members' TLS addresses (the TLS option).
func (c *Cluster) SecureConnectString() string {
	addrs := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		addrs[i] = s.SecureAddr()
	}
	return strings.Join(addrs, ",")
}

// secureConfig is the zoo.cfg lines and the JVM properties of the TLS and
// SASL options.
func (c *Cluster) secureConfig(s *Server) (cfg string, props []string, err error) {
	var b strings.Builder
	if pki := c.opts.pki; pki != nil {
		fmt.Fprintf(&b, "secureClientPort=%d\n", s.SecureClientPort)
		b.WriteString("serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n")
		fmt.Fprintf(&b, "ssl.keyStore.location=%s\nssl.keyStore.type=PEM\n", pki.ServerKeyStore)
		fmt.Fprintf(&b, "ssl.trustStore.location=%s\nssl.trustStore.type=PEM\n", pki.CAFile)
		b.WriteString("ssl.clientAuth=need\n")
		b.WriteString("authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider\n")
	}
	if users := c.opts.saslUsers; len(users) > 0 {
		b.WriteString("authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n")
		b.WriteString("sessionRequireClientSASLAuth=true\n")
		names := make([]string, 0, len(users))
		for u := range users {
			names = append(names, u)
		}
		sort.Strings(names)
		var j strings.Builder
		j.WriteString("Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required")
		for _, u := range names {
			fmt.Fprintf(&j, "\n  user_%s=%q", u, users[u])
		}
		j.WriteString(";\n};\n")
		jaas := filepath.Join(s.dir, "jaas.conf")
		if err := os.WriteFile(jaas, []byte(j.String()), 0o600); err != nil {
			return "", nil, fmt.Errorf("zktest: %w", err)
		}
		props = append(props, "-Djava.security.auth.login.config="+jaas)
	}
	return b.String(), props, nil
}

// debianNetty is what the Netty connection factory needs beside Debian's
// zookeeper.jar, whose manifest leaves netty-codec and netty-resolver out
// (its NIO factory does not use them): without them every Netty
// connection fails with NoClassDefFoundError ByteToMessageDecoder.
var debianNetty = []string{"/usr/share/java/netty-codec.jar", "/usr/share/java/netty-resolver.jar"}

func nettyClasspath(cp string) (string, error) {
	if cp != debianJar {
		return cp, nil // a release's lib/ has all of Netty
	}
	for _, jar := range debianNetty {
		if _, err := os.Stat(jar); err != nil {
			return "", fmt.Errorf("zktest: TLS needs %s beside Debian's ZooKeeper (apt-get install libnetty-java): %w", jar, err)
		}
		cp += string(os.PathListSeparator) + jar
	}
	return cp, nil
}

// secureListening tells whether the TLS port (the TLS option) serves: it
// answers ruok over TLS; nil without one.
func (s *Server) secureListening(deadline time.Time) error {
	if s.SecureClientPort == 0 {
		return nil
	}
	if s.pki == nil {
		c, err := net.DialTimeout("tcp", s.SecureAddr(), time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	}
	// A whole TLS handshake, client certificate and all, bounded by the
	// start's deadline, not an accepted connection: a JVM's first
	// handshake loads and compiles its TLS code, which under make test's
	// load took longer than a Client's per-try bound, again and again, and
	// a test's first TLS session did not come within 30 s.
	return s.pki.tlsAnswers(s.SecureAddr(), max(time.Until(deadline), time.Second))
}

// tlsAnswers says ruok over TLS to addr and takes an answer, or the
// server's refusal of p's client certificate, for a server whose TLS code
// ran. It does not check the server's certificate: tests serve expired and
// misnamed ones on purpose.
func (p *PKI) tlsAnswers(addr string, timeout time.Duration) error {
	pair, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		return err
	}
	raw, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	conn := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{pair}}) // a probe, see above
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	_, err = conn.Write([]byte("ruok")) // after the handshake
	if err == nil {
		var b [4]byte
		if _, err = io.ReadFull(conn, b[:]); err == nil {
			return nil
		}
	}
	if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "remote error" {
		return nil // an alert: it refused the certificate, so its TLS code ran
	}
	return fmt.Errorf("no TLS answer: %w", err)
}
