package zktest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is a certificate authority made in the test process, with a server
// and a client certificate signed by it, written as PEM files: what a TLS
// server (the TLS option) and its clients need. ZooKeeper 3.8 reads PEM key
// and trust stores (ssl.keyStore.type=PEM).
type PKI struct {
	Dir string
	// CAFile is the CA's certificate: the server's trust store and the
	// clients' CA bundle.
	CAFile string
	// ServerKeyStore is the server's certificate and key in one PEM file
	// (ssl.keyStore.location), valid for ServerName, localhost and
	// 127.0.0.1.
	ServerKeyStore string
	// ClientCert and ClientKey are a client certificate and its key.
	ClientCert, ClientKey string

	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
}

// ServerName is the DNS name on every PKI's server certificate.
const ServerName = "zk.gracekit.test"

// NewPKI makes a CA and a server and a client certificate under dir.
func NewPKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("zktest: %w", err)
	}
	p := &PKI{Dir: dir}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("zktest: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "gracekit test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("zktest: CA certificate: %w", err)
	}
	if p.ca, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	p.caKey = key
	p.CAFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(p.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, fmt.Errorf("zktest: %w", err)
	}
	if err := p.IssueServer(time.Now().Add(24 * time.Hour)); err != nil {
		return nil, err
	}
	p.ClientCert, p.ClientKey, err = p.IssueClient("client", time.Now().Add(24*time.Hour))
	if err != nil {
		return nil, err
	}
	return p, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

// IssueServer (re)writes ServerKeyStore with a certificate valid until
// notAfter (in the past for an expired one). A running server reads it at
// its start only.
func (p *PKI) IssueServer(notAfter time.Time) error {
	certPEM, keyPEM, err := p.issue("zookeeper", notAfter, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	p.ServerKeyStore = filepath.Join(p.Dir, "server.pem")
	return writeFile(p.ServerKeyStore, append(keyPEM, certPEM...), 0o600)
}

// IssueClient writes a client certificate named name, valid until
// notAfter, and its key, and returns their files.
func (p *PKI) IssueClient(name string, notAfter time.Time) (certFile, keyFile string, err error) {
	certPEM, keyPEM, err := p.issue(name, notAfter, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(p.Dir, name+".pem"), filepath.Join(p.Dir, name+"-key.pem")
	if err := writeFile(certFile, certPEM, 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, writeFile(keyFile, keyPEM, 0o600)
}

// writeFile replaces name at once (a rename), as a rotation does.
func writeFile(name string, b []byte, mode os.FileMode) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	if err := os.Rename(tmp, name); err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	return nil
}

// issue signs a certificate for cn. Every certificate carries 127.0.0.1 and
// localhost: ZooKeeper's server checks a client certificate's host against
// the client's address by default (ssl.hostnameVerification).
func (p *PKI) issue(cn string, notAfter time.Time, usage ...x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("zktest: key: %w", err)
	}
	notBefore := time.Now().Add(-time.Hour)
	if notAfter.Before(notBefore) {
		notBefore = notAfter.Add(-time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
		DNSNames:    []string{ServerName, "localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("zktest: certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// fourLetter sends cmd to a TLS port with the client certificate and
// returns the answer, as fourLetter does on a plaintext one.
func (p *PKI) fourLetter(addr, cmd string, timeout time.Duration) (string, error) {
	ca, err := os.ReadFile(p.CAFile)
	if err != nil {
		return "", err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	pair, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		return "", err
	}
	raw, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	conn := tls.Client(raw, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, ServerName: "127.0.0.1"})
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte(cmd)); err != nil {
		return "", err
	}
	b, _ := io.ReadAll(conn) // the server closes after its answer
	return string(b), nil
}

// ServerTLS is p's server side as ZooKeeper serves it with
// ssl.clientAuth=need: the servers' certificate, and a client certificate
// required and checked against the CA. For the stand-in TLS servers of
// tests and proxies; set the rest (versions, tickets) on the copy.
func (p *PKI) ServerTLS() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(p.ServerKeyStore, p.ServerKeyStore)
	if err != nil {
		return nil, fmt.Errorf("zktest: the servers' key store %s: %w", p.ServerKeyStore, err)
	}
	ca, err := os.ReadFile(p.CAFile)
	if err != nil {
		return nil, fmt.Errorf("zktest: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("zktest: no certificate in %s", p.CAFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}, nil
}
