package zktls

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/zktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer is a TLS server with pki's server certificate that requires
// a client certificate signed by its CA, as ZooKeeper's ssl.clientAuth=need,
// and echoes each line.
func echoServer(t *testing.T, pki *zktest.PKI) string {
	t.Helper()
	conf, err := pki.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", conf)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, err := bufio.NewReader(c).ReadString('\n')
				if err == nil {
					_, _ = io.WriteString(c, line)
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn) {
	t.Helper()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "ruok\n"); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || got != "ruok\n" {
		t.Fatalf("echo: got %q, %v", got, err)
	}
}

func TestATunnelCarriesPlaintextClientsOverTLSWithAClientCertificate(t *testing.T) {
	pki, err := zktest.NewPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addr := echoServer(t, pki)
	cfg := fxmodule.Config{ZKTLSCA: pki.CAFile, ZKTLSCert: pki.ClientCert, ZKTLSKey: pki.ClientKey}
	addrs, stop, err := ForGoKit(cfg, []string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if addrs[0] == addr {
		t.Fatalf("ForGoKit with TLS settings gave the server's own address %s, want a tunnel's", addr)
	}
	for range 2 { // a connection per dial, as a client reconnecting
		c, err := net.Dial("tcp", addrs[0])
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, c)
	}
	stop()
	stop() // twice: no panic, no wait
	if c, err := net.DialTimeout("tcp", addrs[0], time.Second); err == nil {
		c.Close()
		t.Fatal("the tunnel still listens after stop")
	}
}

func TestWrapChecksTheServerAgainstTheCA(t *testing.T) {
	pki, err := zktest.NewPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := zktest.NewPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addr := echoServer(t, pki)
	tc, err := FromConfig(fxmodule.Config{ZKTLSCA: other.CAFile, ZKTLSCert: pki.ClientCert, ZKTLSKey: pki.ClientKey})
	if err != nil {
		t.Fatal(err)
	}
	dial, err := Wrap(*tc, net.DialTimeout)
	if err != nil {
		t.Fatal(err)
	}
	var unknown x509.UnknownAuthorityError
	if c, err := dial("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("a server signed by another CA was accepted")
	} else if !errors.As(err, &unknown) {
		t.Fatalf("got %v, want an unknown authority", err)
	}
}

func TestForGoKitWithoutTLSGivesTheServersAndRefusesSASL(t *testing.T) {
	servers := []string{"127.0.0.1:2181"}
	addrs, stop, err := ForGoKit(fxmodule.Config{}, servers)
	if err != nil || !slices.Equal(addrs, servers) {
		t.Fatalf("got %v, %v; want %v", addrs, err, servers)
	}
	stop()
	if _, _, err := ForGoKit(fxmodule.Config{ZKSASLUser: "u", ZKSASLPassword: "p"}, servers); err == nil {
		t.Fatal("SASL for go-kit's client: no error")
	}
	if _, err := FromConfig(fxmodule.Config{ZKTLSMinVersion: "1.1"}); err == nil {
		t.Fatal("min version 1.1: no error")
	}
}
