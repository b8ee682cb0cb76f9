package zktls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/sd"
)

// DialFunc has the shape of go-zookeeper's zk.Dialer and sd.DialFunc.
type DialFunc = func(network, address string, timeout time.Duration) (net.Conn, error)

// MinHandshake is the least time a handshake is given: go-zookeeper dials
// with a 1 s timeout, meant for TCP, and a JVM that just started can take
// longer to answer TLS (sd does the same).
const MinHandshake = 3 * time.Second

// FromConfig is the TLS of c's ZKTLS* fields, nil when none is set (a
// plaintext clientPort).
func FromConfig(c fxmodule.Config) (*sd.TLSConfig, error) {
	if c.ZKTLSCA == "" && c.ZKTLSCert == "" && c.ZKTLSKey == "" && c.ZKTLSServerName == "" && c.ZKTLSMinVersion == "" {
		return nil, nil
	}
	t := &sd.TLSConfig{CAFile: c.ZKTLSCA, CertFile: c.ZKTLSCert, KeyFile: c.ZKTLSKey, ServerName: c.ZKTLSServerName}
	switch c.ZKTLSMinVersion {
	case "", "1.2":
		t.MinVersion = tls.VersionTLS12
	case "1.3":
		t.MinVersion = tls.VersionTLS13
	default:
		return nil, fmt.Errorf("invalid %s %q (1.2 or 1.3)", fxmodule.EnvZKTLSMinVersion, c.ZKTLSMinVersion)
	}
	return t, nil
}

// ClientOptions are the sd options of c's ZKTLS* and ZKSASL* fields, for
// a gracekit client built without fxmodule (fxmodule applies them itself).
func ClientOptions(c fxmodule.Config) ([]sd.ClientOption, error) {
	t, err := FromConfig(c)
	if err != nil {
		return nil, err
	}
	var opts []sd.ClientOption
	if t != nil {
		opts = append(opts, sd.TLS(*t))
	}
	if c.ZKSASLUser != "" || c.ZKSASLPassword != "" {
		opts = append(opts, sd.SASL(c.ZKSASLUser, c.ZKSASLPassword))
	}
	return opts, nil
}

// Wrap returns raw with a TLS handshake on top, as cfg says: its CA bundle
// (empty: the system's), client certificate, server name (empty: the
// address's host, an IP checked against the IP SANs) and lowest version.
// The files are read now, once: unlike sd's TLS, a rotated certificate
// needs a new Wrap.
func Wrap(cfg sd.TLSConfig, raw DialFunc) (DialFunc, error) {
	conf := &tls.Config{MinVersion: max(cfg.MinVersion, tls.VersionTLS12)}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("zktls: CA bundle: %w", err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("zktls: CA bundle %s holds no PEM certificate", cfg.CAFile)
		}
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" {
		pair, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("zktls: client certificate: %w", err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		start := time.Now()
		c, err := raw(network, address, timeout)
		if err != nil {
			return nil, err
		}
		conf := conf.Clone()
		conf.ServerName = cfg.ServerName
		if conf.ServerName == "" {
			conf.ServerName, _, _ = net.SplitHostPort(address)
		}
		tc := tls.Client(c, conf)
		ctx, cancel := context.WithTimeout(context.Background(), max(timeout-time.Since(start), MinHandshake))
		defer cancel()
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("zktls: TLS handshake with %s: %w", address, err)
		}
		return tc, nil
	}, nil
}

// ForGoKit is what go-kit's sd/zk.NewClient is given for servers under c:
// servers themselves without TLS, else the addresses of a Tunnel to them
// over TLS, which stop closes (a no-op without one). go-kit's client dials
// with net.DialTimeout and takes no dialer, so a go-kit team on a TLS
// ensemble runs such a tunnel (or a sidecar: ghostunnel, stunnel); it has
// no SASL either, hence an error with ZKSASLUser.
func ForGoKit(c fxmodule.Config, servers []string) (addrs []string, stop func(), err error) {
	if c.ZKSASLUser != "" {
		return nil, nil, errors.New("go-kit's sd/zk cannot authenticate with SASL (" + fxmodule.EnvZKSASLUser + ")")
	}
	t, err := FromConfig(c)
	if err != nil || t == nil {
		return servers, func() {}, err
	}
	dial, err := Wrap(*t, net.DialTimeout)
	if err != nil {
		return nil, nil, err
	}
	tun, err := NewTunnel(servers, dial)
	if err != nil {
		return nil, nil, err
	}
	return tun.Addrs(), tun.Close, nil
}
