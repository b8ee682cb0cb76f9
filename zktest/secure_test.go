package zktest

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSecureOptionsRefuseNothingToServe(t *testing.T) {
	var o options
	if err := TLS(nil).apply(&o); err == nil || !strings.Contains(err.Error(), "NewPKI") {
		t.Errorf("TLS(nil): %v", err)
	}
	if err := SASL(nil).apply(&o); err == nil {
		t.Error("SASL(nil) was taken")
	}
}

// The PKI's files are what crypto/tls and ZooKeeper's PEM loader read:
// the server's key store is its key and certificate in one file, the
// certificates name the test's server, and an expired one is expired.
func TestPKIWritesUsablePEM(t *testing.T) {
	pki, err := NewPKI(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate in CAFile")
	}
	server, err := tls.LoadX509KeyPair(pki.ServerKeyStore, pki.ServerKeyStore)
	if err != nil {
		t.Fatalf("server key store: %v", err)
	}
	client, err := tls.LoadX509KeyPair(pki.ClientCert, pki.ClientKey)
	if err != nil {
		t.Fatalf("client pair: %v", err)
	}
	for _, c := range []tls.Certificate{server, client} {
		if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: ServerName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("%s: %v", c.Leaf.Subject.CommonName, err)
		}
	}
	cert, key, err := pki.IssueClient("old", time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	old, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
		t.Error("an expired certificate verified")
	}
}
