package sd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// securePKI makes a PKI under the test's directory.
func securePKI(t *testing.T) *zktest.PKI {
	t.Helper()
	pki, err := zktest.NewPKI(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	return pki
}

func tlsOf(pki *zktest.PKI) sd.TLSConfig {
	return sd.TLSConfig{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}
}

const saslUser, saslPassword = "orders-svc", "pa55-Word"

// The provider's and the consumer's paths (register, watch with the watch
// session and bulk reads, drain, deregister, stop) over TLS with client
// certificates, and over SASL with sessionRequireClientSASLAuth.
func TestTLSAndSASLRegisterWatchDrainStop(t *testing.T) {
	t.Parallel()
	pki := securePKI(t)
	tlsZK := zktest.New(t, zktest.TLS(pki))
	saslZK := zktest.New(t, zktest.SASL(map[string]string{saslUser: saslPassword}))
	tests := []struct {
		name    string
		connect string
		opts    []sd.ClientOption
		acl     zk.ACL // the nodes' writer
	}{
		{"TLS with a client certificate", tlsZK.SecureConnectString(), []sd.ClientOption{sd.TLS(tlsOf(pki))}, zk.ACL{Perms: zk.PermAll, Scheme: "world", ID: "anyone"}},
		{"SASL DIGEST-MD5", saslZK.ConnectString(), []sd.ClientOption{sd.SASL(saslUser, saslPassword)}, zk.ACL{Perms: zk.PermAll, Scheme: "sasl", ID: saslUser}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			newSecure := func() *sd.Client {
				cl, err := sd.NewClient(tt.connect, append([]sd.ClientOption{sd.SessionTimeout(2 * time.Second), sd.ConnectTimeout(testutil.FirstSecureConnect)}, tt.opts...)...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(cl.Close)
				return cl
			}
			provider, consumer := newSecure(), newSecure()
			// Recursive in both passes of the suite: the watch session is
			// one of the connections under test (per-node watches ride the
			// own session, which the registrations cover).
			in, ch := newInstancer(t, consumer, "orders", sd.WithWatchMode(sd.WatchRecursive))
			waitSet(t, ch)
			r1 := register(t, provider, instance("orders", 8001))
			r2 := register(t, provider, instance("orders", 8002))
			waitSet(t, ch, "127.0.0.1:8001", "127.0.0.1:8002")
			if consumer.WatchSessionStats().Created == 0 {
				t.Error("the consumer's watch session was never made")
			}

			var acl []zk.ACL
			if err := retryOn(provider, func(c *zk.Conn) (err error) { acl, _, err = c.GetACL("/services/orders/orders-8001"); return err }); err != nil {
				t.Fatal(err)
			}
			if !containsACL(acl, tt.acl) {
				t.Errorf("node ACL %v: want %v in it", acl, tt.acl)
			}

			if err := r1.SetStatus(context.Background(), sd.StatusOutOfService); err != nil {
				t.Fatal(err)
			}
			waitSet(t, ch, "127.0.0.1:8002")
			if err := r2.DeregisterContext(context.Background()); err != nil {
				t.Fatal(err)
			}
			waitSet(t, ch)
			in.Stop()
			provider.Close()
			consumer.Close()
		})
	}
}

// retryOn runs f on the Client's own go-zookeeper connection.
func retryOn(c *sd.Client, f func(*zk.Conn) error) error { return f(sd.ZKConn(c)) }

func containsACL(acl []zk.ACL, want zk.ACL) bool {
	for _, a := range acl {
		if a == want {
			return true
		}
	}
	return false
}

// Each way a secured ensemble refuses a client ends the first call within
// the connect timeout, with an error that names the server, what failed
// and what to change; no password in it or in the logs.
func TestSecurityRefusalsNameTheServerAndTheFix(t *testing.T) {
	t.Parallel()
	pki := securePKI(t)
	other := securePKI(t)
	zkc := zktest.New(t, zktest.TLS(pki), zktest.SASL(map[string]string{saslUser: saslPassword}))
	expiredPKI := securePKI(t)
	if err := expiredPKI.IssueServer(time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	expired := zktest.New(t, zktest.TLS(expiredPKI))

	good := tlsOf(pki)
	wrongName := good
	wrongName.ServerName = "other.example"
	unknownCA := good
	unknownCA.CAFile = other.CAFile
	sasl := sd.SASL(saslUser, saslPassword)
	tests := []struct {
		name    string
		connect string
		opts    []sd.ClientOption
		want    []string
	}{
		{"a plaintext client on the TLS port", zkc.SecureConnectString(), []sd.ClientOption{sasl}, []string{"this is a TLS port", "-tls-*"}},
		{"an unknown CA", zkc.SecureConnectString(), []sd.ClientOption{sd.TLS(unknownCA), sasl}, []string{"certificate signed by unknown authority", "-tls-ca"}},
		{"a name that does not match", zkc.SecureConnectString(), []sd.ClientOption{sd.TLS(wrongName), sasl}, []string{`not valid for "other.example"`, "-tls-server-name"}},
		{"an expired server certificate", expired.SecureConnectString(), []sd.ClientOption{sd.TLS(tlsOf(expiredPKI))}, []string{"expired", "renew the server's certificate"}},
		{"no client certificate", zkc.SecureConnectString(), []sd.ClientOption{sd.TLS(sd.TLSConfig{CAFile: pki.CAFile}), sasl}, []string{"refused the client certificate", "-tls-cert"}},
		{"a wrong SASL password", zkc.SecureConnectString(), []sd.ClientOption{sd.TLS(good), sd.SASL(saslUser, "not-the-password")}, []string{"refused the user or password", "-sasl-password"}},
		{"SASL required but not set", zkc.SecureConnectString(), []sd.ClientOption{sd.TLS(good)}, []string{"requires SASL", "-sasl-user"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			// Long: each refusal ends the call when it comes, and a loaded
			// JVM's may come after 5 s (once in make stress). The error's
			// words tell a refusal from the timeout's "gave no session".
			const connectTimeout = 20 * time.Second
			opts := append([]sd.ClientOption{sd.SessionTimeout(2 * time.Second), sd.ConnectTimeout(connectTimeout),
				sd.Logger(slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelDebug})))}, tt.opts...)
			cl, err := sd.NewClient(tt.connect, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			r, err := sd.NewRegistrar(cl, instance("orders", 8001))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), connectTimeout+10*time.Second)
			defer cancel()
			err = r.RegisterContext(ctx)
			took := time.Since(start)
			if err == nil {
				t.Fatal("registered")
			}
			if took > connectTimeout+time.Second {
				t.Errorf("failed after %v, over the connect timeout %v: %v", took, connectTimeout, err)
			}
			msg := err.Error()
			for _, w := range append(tt.want, strings.Split(tt.connect, ",")[0]) {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q: want %q in it", msg, w)
				}
			}
			cl.Close()
			for _, secret := range []string{saslPassword, "not-the-password"} {
				if strings.Contains(msg, secret) || strings.Contains(logs.String(), secret) {
					t.Errorf("the password %q shows in the error or the logs", secret)
				}
			}
		})
	}
}

// A watch-only Client (an Instancer's first load) says the same.
func TestSASLRefusalEndsTheFirstLoad(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t, zktest.SASL(map[string]string{saslUser: saslPassword}))
	for _, mode := range []sd.WatchMode{sd.WatchRecursive, sd.WatchPerNode} {
		t.Run(mode.String(), func(t *testing.T) {
			// A connect timeout a loaded JVM's refusal comes within.
			cl, err := sd.NewClient(zkc.ConnectString(), sd.SessionTimeout(2*time.Second), sd.ConnectTimeout(20*time.Second), sd.SASL(saslUser, "wrong"))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			_, err = sd.NewInstancerContext(context.Background(), cl, "orders", sd.WithWatchMode(mode))
			// Ended by the refusal, not by the connect timeout.
			if err == nil || !strings.Contains(err.Error(), "refused the user or password") || !strings.Contains(err.Error(), "refused the connection") {
				t.Fatalf("first load: %v", err)
			}
		})
	}
}

func TestSecurityFilesAreCheckedAtConstruction(t *testing.T) {
	t.Parallel()
	pki := securePKI(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	expiredCert, expiredKey, err := pki.IssueClient("expired", time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name string
		give sd.TLSConfig
		want string
	}{
		{"a missing CA file", sd.TLSConfig{CAFile: missing}, "TLS CA file \"" + missing + "\""},
		{"a CA file with no certificate", sd.TLSConfig{CAFile: garbage}, "holds no PEM certificate"},
		{"a missing certificate file", sd.TLSConfig{CAFile: pki.CAFile, CertFile: missing, KeyFile: pki.ClientKey}, "TLS client certificate file \"" + missing + "\""},
		{"a malformed certificate file", sd.TLSConfig{CAFile: pki.CAFile, CertFile: garbage, KeyFile: pki.ClientKey}, "are not a PEM certificate and its matching private key"},
		{"a key that is not the certificate's", sd.TLSConfig{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: expiredKey}, "private key does not match public key"},
		{"a certificate without its key", sd.TLSConfig{CAFile: pki.CAFile, CertFile: pki.ClientCert}, "give both files"},
		{"an expired client certificate", sd.TLSConfig{CAFile: pki.CAFile, CertFile: expiredCert, KeyFile: expiredKey}, "expired at"},
		{"a TLS version it does not know", sd.TLSConfig{MinVersion: 0x0301}, "1.2 or 1.3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, construct := range []func() error{
				func() error { _, err := sd.NewClient("127.0.0.1:1", sd.TLS(tt.give)); return err },
				func() error { _, err := sd.NewSession("127.0.0.1:1", sd.TLS(tt.give)); return err },
			} {
				err := construct()
				var ce *sd.ConfigError
				if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("got %v, want a *sd.ConfigError with %q", err, tt.want)
				}
			}
		})
	}
	if _, err := sd.NewClient("127.0.0.1:1", sd.SASL("", "x")); err == nil {
		t.Error("an empty SASL user was taken")
	}
	if _, err := sd.NewClient("127.0.0.1:1", sd.SASL("u", "")); err == nil {
		t.Error("an empty SASL password was taken")
	}
}

// A rotated client certificate is used by the next connection, without a
// restart.
func TestClientCertificateRotation(t *testing.T) {
	t.Parallel()
	pki := securePKI(t)
	zkc := zktest.New(t, zktest.TLS(pki))
	cl, err := sd.NewClient(zkc.SecureConnectString(), sd.SessionTimeout(2*time.Second), sd.ConnectTimeout(testutil.FirstSecureConnect), sd.TLS(tlsOf(pki)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	register(t, cl, instance("orders", 8001))
	// A new pair in the same files; the next connections present it.
	if _, _, err := pki.IssueClient("client", time.Now().Add(48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	before := sd.PresentedCertificate(cl)
	if err := zkc.StopAll(); err != nil {
		t.Fatal(err)
	}
	if err := zkc.StartAll(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the client back on the server", cl.Connected)
	if after := sd.PresentedCertificate(cl); after.SerialNumber.Cmp(before.SerialNumber) == 0 || after.NotAfter.Before(time.Now().Add(47*time.Hour)) {
		t.Fatalf("the connection after the rotation presented the old certificate (until %v)", after.NotAfter)
	}
}

// The settings print without the password.
func TestSecuritySettingsPrintNoPassword(t *testing.T) {
	sec := sd.SecurityOf(sd.SASL("u", saslPassword), sd.TLS(sd.TLSConfig{}))
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		if s := fmt.Sprintf(verb, sec); strings.Contains(s, saslPassword) || strings.Contains(s, fmt.Sprintf("%x", saslPassword)) {
			t.Errorf("%s shows the password: %s", verb, s)
		}
	}
}

// syncWriter lets a log buffer be written from the Client's goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// An ensemble with both TLS and SASL: a member's loss moves the session to
// another, which does TLS and SASL again; the registration stays.
func TestTLSAndSASLEnsembleKeepsTheSessionAcrossAMemberLoss(t *testing.T) {
	t.Parallel()
	pki := securePKI(t)
	zkc := zktest.New(t, zktest.Size(3), zktest.TLS(pki), zktest.SASL(map[string]string{saslUser: saslPassword}))
	cl, err := sd.NewClient(zkc.SecureConnectString(), sd.SessionTimeout(memberLossSession), sd.ConnectTimeout(testutil.FirstSecureConnect), sd.TLS(tlsOf(pki)), sd.SASL(saslUser, saslPassword))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r := register(t, cl, instance("orders", 8001))
	sid := cl.SessionID()
	server := sd.ZKConn(cl).Server()
	for _, s := range zkc.Servers {
		if s.SecureAddr() == server {
			if err := s.Stop(); err != nil {
				t.Fatal(err)
			}
		}
	}
	testutil.WaitFor(t, "the session back on another member", func() bool {
		return cl.Connected() && sd.ZKConn(cl).Server() != server
	})
	if cl.SessionID() != sid {
		t.Fatalf("session %x became %x", sid, cl.SessionID())
	}
	in, ch := newInstancer(t, cl, "orders")
	waitSet(t, ch, "127.0.0.1:8001")
	in.Stop()
	if err := r.DeregisterContext(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// The same without a server restart: connections cut under the Client
// reconnect to the same server, which would resume the old TLS session;
// a rotation makes the next connection a full handshake with the new pair.
func TestClientCertificateRotationOnReconnect(t *testing.T) {
	t.Parallel()
	pki := securePKI(t)
	zkc := zktest.New(t, zktest.TLS(pki))
	var mu sync.Mutex
	var conns []net.Conn
	track := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, timeout)
		if err == nil {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
		return c, err
	}
	cut := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
		conns = nil
	}
	cl, err := sd.NewClient(zkc.SecureConnectString(), sd.SessionTimeout(4*time.Second), sd.ConnectTimeout(testutil.FirstSecureConnect), sd.TLS(tlsOf(pki)), sd.Dialer(track))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	register(t, cl, instance("orders", 8001))
	cut() // a reconnect that resumes the TLS session
	testutil.WaitFor(t, "the client back", cl.Connected)
	before := sd.PresentedCertificate(cl)
	if _, _, err := pki.IssueClient("client", time.Now().Add(48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	cut()
	testutil.WaitFor(t, "the client back with the new certificate", func() bool {
		after := sd.PresentedCertificate(cl)
		return cl.Connected() && after.SerialNumber.Cmp(before.SerialNumber) != 0
	})
}

// A Java service configured as docs/SECURITY.md says (Curator, the
// ZooKeeper client's TLS and JAAS Client section) reads what gracekit
// registered on an ensemble that wants both.
func TestCuratorOverTLSAndSASLReadsWhatGracekitRegistered(t *testing.T) {
	t.Parallel()
	pki := securePKI(t)
	zkc := zktest.New(t, zktest.TLS(pki), zktest.SASL(map[string]string{saslUser: saslPassword}))
	cl, err := sd.NewClient(zkc.SecureConnectString(), sd.SessionTimeout(4*time.Second), sd.ConnectTimeout(testutil.FirstSecureConnect), sd.TLS(tlsOf(pki)), sd.SASL(saslUser, saslPassword))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	register(t, cl, instance("orders", 8001))

	// The client's key store is its certificate and key in one PEM file.
	keyStore := filepath.Join(t.TempDir(), "client-keystore.pem")
	certPEM, err := os.ReadFile(pki.ClientCert)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(pki.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyStore, append(keyPEM, certPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	jaas := filepath.Join(t.TempDir(), "jaas.conf")
	if err := os.WriteFile(jaas, fmt.Appendf(nil, "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  username=%q\n  password=%q;\n};\n", saslUser, saslPassword), 0o600); err != nil {
		t.Fatal(err)
	}
	cur := testutil.NewCurator(t, zkc.SecureConnectString(),
		"-Dzookeeper.client.secure=true",
		"-Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty",
		"-Dzookeeper.ssl.keyStore.location="+keyStore, "-Dzookeeper.ssl.keyStore.type=PEM",
		"-Dzookeeper.ssl.trustStore.location="+pki.CAFile, "-Dzookeeper.ssl.trustStore.type=PEM",
		"-Djava.security.auth.login.config="+jaas)
	got, err := cur.List(t, sd.DefaultBasePath, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "orders-8001 127.0.0.1 8001 null UP") {
		t.Fatalf("Curator lists %q", got)
	}
}

// A SASL user is warned of a parent anyone may write, as a digest user is,
// with the command that fixes it.
func TestSASLUserIsWarnedOfALooseParent(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t, zktest.SASL(map[string]string{saslUser: saslPassword, "admin": "admin-pw"}))
	admin, err := sd.NewClient(zkc.ConnectString(), sd.SessionTimeout(2*time.Second), sd.SASL("admin", "admin-pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := retryOn(admin, func(c *zk.Conn) error {
		_, err := c.Create("/services", nil, 0, zk.WorldACL(zk.PermAll))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cl, err := sd.NewClient(zkc.ConnectString(), sd.SessionTimeout(2*time.Second), sd.SASL(saslUser, saslPassword),
		sd.Logger(slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	register(t, cl, instance("orders", 8001))
	want := "setAcl /services world:anyone:r,sasl:" + saslUser + ":cdrwa"
	if !strings.Contains(logs.String(), want) {
		t.Fatalf("logs %q: want the fix %q", logs.String(), want)
	}
	if strings.Contains(logs.String(), saslPassword) {
		t.Fatal("the logs show the password")
	}
}
