package main

import (
	"crypto/tls"
	"fmt"
	"maps"
	"net"
	"path/filepath"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/examples/internal/zktls"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// -zk-tls: the ensemble requires TLS with a client certificate
// (zktest.TLS, ssl.clientAuth=need) and every connection to it is TLS: the
// children's and the CLI's (GRACEKIT_ZK_TLS_*), the in-process consumers'
// and the bursts' (sd.TLS), the driver's own sessions, the proxies' (which
// terminate TLS, proxy.go), and the recorder's expiries. Only zktest's
// four-letter words (which member serves, its sessions) use the members'
// plaintext clientPort. No SASL: nodes a SASL user makes are writable by
// that user only, and the driver's drains write with go-zookeeper.

// zkSecurity is the run's PKI and what each kind of client takes from it.
type zkSecurity struct {
	pki    *zktest.PKI
	client sd.TLSConfig
	dial   zktls.DialFunc    // to a member's secureClientPort
	server *tls.Config       // the proxies' listeners
	vars   map[string]string // GRACEKIT_ZK_TLS_*
}

func newZKSecurity(dir string) (*zkSecurity, error) {
	pki, err := zktest.NewPKI(dir)
	if err != nil {
		return nil, err
	}
	s := &zkSecurity{pki: pki, client: sd.TLSConfig{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}}
	if s.dial, err = zktls.Wrap(s.client, net.DialTimeout); err != nil {
		return nil, err
	}
	if s.server, err = pki.ServerTLS(); err != nil {
		return nil, err
	}
	s.vars = map[string]string{"GRACEKIT_ZK_TLS_CA": pki.CAFile, "GRACEKIT_ZK_TLS_CERT": pki.ClientCert, "GRACEKIT_ZK_TLS_KEY": pki.ClientKey}
	return s, nil
}

// startEnsemble starts the run's ensemble, with TLS under -zk-tls.
func (d *driver) startEnsemble(opts ...zktest.Option) (*zktest.Cluster, error) {
	if d.cfg.zkTLS {
		sec, err := newZKSecurity(filepath.Join(d.tmp, "pki"))
		if err != nil {
			return nil, fmt.Errorf("-zk-tls: %w", err)
		}
		d.sec = sec
		opts = append(opts, zktest.TLS(sec.pki))
	}
	return zktest.Start(filepath.Join(d.tmp, "zookeeper"), opts...)
}

// memberAddr is where clients reach s: its secureClientPort under -zk-tls.
func (d *driver) memberAddr(s *zktest.Server) string {
	if d.sec != nil {
		return s.SecureAddr()
	}
	return s.Addr()
}

// memberAddrs are c's memberAddr.
func (d *driver) memberAddrs(c *zktest.Cluster) []string {
	out := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		out[i] = d.memberAddr(s)
	}
	return out
}

// zkDialer is the dialer of the driver's own go-zookeeper sessions (nil:
// go-zookeeper's own).
func (d *driver) zkDialer() zk.Dialer {
	if d.sec != nil {
		return d.sec.dial
	}
	return nil
}

// sdOptions are the security options of the driver's sd clients.
func (d *driver) sdOptions() []sd.ClientOption {
	if d.sec != nil {
		return []sd.ClientOption{sd.TLS(d.sec.client)}
	}
	return nil
}

// newProxy is a proxy to the run's ensemble.
func (d *driver) newProxy() (*zkProxy, error) {
	var sec *proxyTLS
	if d.sec != nil {
		sec = &proxyTLS{server: d.sec.server, dial: d.sec.dial}
	}
	return newZKProxy(d.memberAddrs(d.cluster), sec)
}

// tlsEnv adds GRACEKIT_ZK_TLS_* to vars under -zk-tls.
func (d *driver) tlsEnv(vars map[string]string) {
	if d.sec != nil {
		maps.Copy(vars, d.sec.vars)
	}
}
