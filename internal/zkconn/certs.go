package zkconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"sync"
	"time"
)

// certFiles is a client certificate read from its files, read again when
// either file's size or modification time changed: a rotation (cert-manager,
// Vault) rewrites the files and the next connection uses the new pair.
type certFiles struct {
	certFile, keyFile string

	mu         sync.Mutex
	cert       *tls.Certificate
	certStamp  stamp
	keyStamp   stamp
	lastReload error // the last failed re-read, kept while the old pair serves
	presented  *x509.Certificate
}

type stamp struct {
	size int64
	mod  time.Time
}

func stampOf(name string) (stamp, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return stamp{}, err
	}
	return stamp{fi.Size(), fi.ModTime()}, nil
}

func loadCertFiles(certFile, keyFile string) (*certFiles, error) {
	f := &certFiles{certFile: certFile, keyFile: keyFile}
	cs, err := stampOf(certFile)
	if err != nil {
		return nil, &ConfigError{Field: "TLS client certificate file", Value: certFile, Want: "cannot be read; give the client's PEM certificate", Err: errors.Unwrap(err)}
	}
	ks, err := stampOf(keyFile)
	if err != nil {
		return nil, &ConfigError{Field: "TLS client key file", Value: keyFile, Want: "cannot be read; give the PEM private key of the client certificate", Err: errors.Unwrap(err)}
	}
	cert, err := readPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	if now := time.Now(); now.After(cert.Leaf.NotAfter) {
		return nil, &ConfigError{Field: "TLS client certificate file", Value: certFile,
			Want: "expired at " + cert.Leaf.NotAfter.UTC().Format(time.RFC3339) + "; issue a new certificate"}
	}
	f.cert, f.certStamp, f.keyStamp = cert, cs, ks
	return f, nil
}

// readPair reads and parses a certificate and its key, naming the file at
// fault.
func readPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, &ConfigError{Field: "TLS client certificate file", Value: certFile, Want: "cannot be read; give the client's PEM certificate", Err: errors.Unwrap(err)}
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, &ConfigError{Field: "TLS client key file", Value: keyFile, Want: "cannot be read; give the PEM private key of the client certificate", Err: errors.Unwrap(err)}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// X509KeyPair says which of the two it could not use.
		return nil, &ConfigError{Field: "TLS client certificate and key files", Value: certFile + ", " + keyFile,
			Want: "are not a PEM certificate and its matching private key", Err: err}
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, &ConfigError{Field: "TLS client certificate file", Value: certFile, Want: "holds no valid certificate", Err: err}
		}
	}
	return &cert, nil
}

// get is tls.Config.GetClientCertificate. A pair that fails to load (a
// rotation that wrote the certificate and not yet its key) leaves the old
// one in use until the files agree.
func (f *certFiles) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cs, err1 := stampOf(f.certFile)
	ks, err2 := stampOf(f.keyFile)
	if err1 == nil && err2 == nil && (cs != f.certStamp || ks != f.keyStamp) {
		cert, err := readPair(f.certFile, f.keyFile)
		if err == nil {
			f.cert, f.certStamp, f.keyStamp, f.lastReload = cert, cs, ks, nil
		} else {
			f.lastReload = err
		}
	}
	f.presented = f.cert.Leaf
	return f.cert, nil
}

// changed tells whether either file changed since the pair in use was
// read (get reads the new pair at the next full handshake).
func (f *certFiles) changed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	cs, err1 := stampOf(f.certFile)
	ks, err2 := stampOf(f.keyFile)
	return err1 == nil && err2 == nil && (cs != f.certStamp || ks != f.keyStamp)
}
