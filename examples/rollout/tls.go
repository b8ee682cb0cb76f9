package main

import (
	"fmt"
	"path/filepath"

	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// -zk-tls: the run's ZooKeepers require TLS with a client certificate
// (zktest.TLS: ssl.clientAuth=need), and every child is given their
// secureClientPorts and GRACEKIT_ZK_TLS_*, as a user would configure it;
// their plaintext clientPort is the harness's own (four-letter words) and
// no child is told it. No SASL: go-kit's sd/zk, which the demo compares
// against, cannot authenticate with it.

// makePKI makes the run's CA, server and client certificates.
func (d *driver) makePKI() error {
	pki, err := zktest.NewPKI(filepath.Join(d.tmp, "pki"))
	if err != nil {
		return fmt.Errorf("-zk-tls: %w", err)
	}
	d.pki = pki
	d.zkTLS = &sd.TLSConfig{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}
	d.tlsVars = map[string]string{
		"GRACEKIT_ZK_TLS_CA":   pki.CAFile,
		"GRACEKIT_ZK_TLS_CERT": pki.ClientCert,
		"GRACEKIT_ZK_TLS_KEY":  pki.ClientKey,
	}
	return nil
}

// zkOptions are the options of the ZooKeepers the driver starts.
func (d *driver) zkOptions() []zktest.Option {
	if d.pki == nil {
		return nil
	}
	return []zktest.Option{zktest.TLS(d.pki)}
}

// connectString is what the children and the driver's sessions connect
// to: c's secureClientPorts with -zk-tls.
func (d *driver) connectString(c *zktest.Cluster) string {
	if d.pki != nil {
		return c.SecureConnectString()
	}
	return c.ConnectString()
}

func (d *driver) tlsNote() string {
	if d.pki == nil {
		return ""
	}
	return " requiring TLS with a client certificate (-zk-tls)"
}
