package zkconn_test

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/gracekit/gracekit/internal/zkconn"
	"github.com/gracekit/gracekit/internal/zkwire"
	"github.com/gracekit/gracekit/zktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(zktest.SharedMain(m)) }

// secured is one server with TLS (client auth) and SASL required, for the
// tests of this package.
func secured(t *testing.T) (*zktest.Cluster, *zktest.PKI) {
	t.Helper()
	pki, err := zktest.NewPKI(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	return zktest.New(t, zktest.TLS(pki), zktest.SASL(map[string]string{"app": "s3cret"})), pki
}

func TestTLSAndSASLGoZookeeperAndZkwire(t *testing.T) {
	t.Parallel()
	zkc, pki := secured(t)
	l, err := zkconn.New(zkconn.Security{
		TLS:  &zkconn.TLS{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey},
		SASL: &zkconn.SASL{User: "app", Password: "s3cret"},
	})
	if err != nil {
		t.Fatal(err)
	}
	dial := l.Wrap(net.DialTimeout)
	conn, _, err := zk.Connect([]string{zkc.Servers[0].SecureAddr()}, 4*time.Second, zk.WithDialer(zk.Dialer(dial)), zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Create("/tls", []byte("x"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create over TLS and SASL: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialLimit)
	defer cancel()
	wc, err := zkwire.Dial(ctx, zkwire.Config{Addr: zkc.Servers[0].SecureAddr(), Dial: dial, SessionTimeout: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	r, err := wc.Do(ctx, zkwire.OpGetData, zkwire.GetDataBody("/tls"))
	if err != nil {
		t.Fatalf("zkwire read over TLS and SASL: %v", err)
	}
	if data, _, _ := zkwire.ParseGetData(r.Body); string(data) != "x" {
		t.Fatalf("read %q", data)
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	zkc, pki := secured(t)
	sasl := &zkconn.SASL{User: "app", Password: "s3cret"}
	good := &zkconn.TLS{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}
	other, err := zktest.NewPKI(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	noCert := &zkconn.TLS{CAFile: pki.CAFile}
	wrongName := *good
	wrongName.ServerName = "other.example"
	tests := []struct {
		name string
		give zkconn.Security
		addr func(*zktest.Server) string
		want string
	}{
		{"plaintext client on the TLS port", zkconn.Security{SASL: sasl}, (*zktest.Server).SecureAddr, "this is a TLS port"},
		{"unknown CA", zkconn.Security{TLS: &zkconn.TLS{CAFile: other.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}, SASL: sasl}, (*zktest.Server).SecureAddr, "not signed by a CA of the TLS CA"},
		{"name mismatch", zkconn.Security{TLS: &wrongName, SASL: sasl}, (*zktest.Server).SecureAddr, `not valid for "other.example"`},
		{"no client certificate", zkconn.Security{TLS: noCert, SASL: sasl}, (*zktest.Server).SecureAddr, "refused the client certificate"},
		{"TLS client on the plaintext port", zkconn.Security{TLS: good, SASL: sasl}, (*zktest.Server).Addr, "this is its clientPort, not its secureClientPort"},
		{"wrong SASL password", zkconn.Security{TLS: good, SASL: &zkconn.SASL{User: "app", Password: "wrong"}}, (*zktest.Server).SecureAddr, "refused the user or password"},
		{"SASL required but not set", zkconn.Security{TLS: good}, (*zktest.Server).SecureAddr, "requires SASL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := zkconn.New(tt.give)
			if err != nil {
				t.Fatal(err)
			}
			addr := tt.addr(zkc.Servers[0])
			ctx, cancel := context.WithTimeout(context.Background(), dialLimit)
			defer cancel()
			c, err := zkwire.Dial(ctx, zkwire.Config{Addr: addr, Dial: l.Wrap(net.DialTimeout), SessionTimeout: 4 * time.Second})
			if err == nil {
				// Only a missing SASL shows after the session: at its first request.
				_, err = c.Do(ctx, zkwire.OpGetData, zkwire.GetDataBody("/"))
				c.Close()
			}
			if err == nil {
				t.Fatal("no error")
			}
			f := l.Failure()
			if f == nil {
				t.Fatalf("no standing failure; the dial said %v", err)
			}
			if !strings.Contains(f.Error(), tt.want) || !strings.Contains(f.Error(), addr) {
				t.Fatalf("failure %q: want %q and the server %s", f, tt.want, addr)
			}
			if strings.Contains(f.Error(), "s3cret") || strings.Contains(f.Error(), "wrong") {
				t.Fatalf("failure %q shows the password", f)
			}
			t.Log(f)
		})
	}
}

// A client with SASL against a server without it is told so, not left to
// time out.
func TestSASLAgainstAServerWithoutIt(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t)
	l, err := zkconn.New(zkconn.Security{SASL: &zkconn.SASL{User: "app", Password: "pw-123"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialLimit)
	defer cancel()
	c, err := zkwire.Dial(ctx, zkwire.Config{Addr: zkc.Addrs()[0], Dial: l.Wrap(net.DialTimeout), SessionTimeout: 4 * time.Second})
	if err == nil {
		c.Close()
		t.Fatal("a session without SASL on the server")
	}
	if f := l.Failure(); f == nil || !strings.Contains(f.Error(), "SASL") {
		t.Fatalf("failure %v (dial %v)", f, err)
	}
	t.Log(l.Failure())
}

func TestARefusalHoldsItsServerOnly(t *testing.T) {
	t.Parallel()
	zkc, pki := secured(t)
	l, err := zkconn.New(zkconn.Security{TLS: &zkconn.TLS{CAFile: pki.CAFile}}) // no client certificate
	if err != nil {
		t.Fatal(err)
	}
	dial := l.Wrap(net.DialTimeout)
	addr := zkc.Servers[0].SecureAddr()
	ctx, cancel := context.WithTimeout(context.Background(), dialLimit)
	defer cancel()
	if _, err := zkwire.Dial(ctx, zkwire.Config{Addr: addr, Dial: dial, SessionTimeout: 4 * time.Second}); err == nil {
		t.Fatal("a session without a client certificate")
	}
	if !l.AllHeld([]string{addr}) || l.AllHeld([]string{addr, "127.0.0.1:1"}) {
		t.Fatal("AllHeld should hold the refusing server only")
	}
	start := time.Now()
	if _, err := dial("tcp", addr, time.Second); err == nil || !strings.Contains(err.Error(), "refused the client certificate") {
		t.Fatalf("a held server was dialled: %v", err)
	}
	if time.Since(start) > 100*time.Millisecond {
		t.Fatal("a held server's dial took time: it went to the network")
	}
}

// ZooKeeper 3.8 speaks TLSv1.2 by default (ssl.protocol): a client that
// asks for 1.3 at least is told what to change.
func TestMinimumVersionTheServerLacks(t *testing.T) {
	t.Parallel()
	zkc, pki := secured(t)
	l, err := zkconn.New(zkconn.Security{TLS: &zkconn.TLS{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey, MinVersion: tls.VersionTLS13}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Wrap(net.DialTimeout)("tcp", zkc.Servers[0].SecureAddr(), time.Second)
	if err == nil || !strings.Contains(err.Error(), "minimum TLS version") {
		t.Fatalf("dial: %v", err)
	}
}

// A server that closes every connection (over its maxClientCnxns, or
// stopping) is the network's failure, not a setting: nothing is held.
func TestAClosedConnectionIsNotARefusal(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
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
			_ = c.Close()
		}
	}()
	defer func() { ln.Close(); <-done }()
	pki, err := zktest.NewPKI(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sec := range []zkconn.Security{{}, {TLS: &zkconn.TLS{CAFile: pki.CAFile}}} {
		l, err := zkconn.New(sec)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), dialLimit)
		_, err = zkwire.Dial(ctx, zkwire.Config{Addr: ln.Addr().String(), Dial: l.Wrap(net.DialTimeout), SessionTimeout: 4 * time.Second})
		cancel()
		if err == nil {
			t.Fatal("a session from a server that closes everything")
		}
		if f := l.Failure(); f != nil || l.AllHeld([]string{ln.Addr().String()}) {
			t.Fatalf("%v: a closed connection was taken for a refusal: %v", sec, f)
		}
	}
}

// dialLimit bounds a test's dial: a loaded JVM's TLS handshake may take
// seconds, and a refusal ends the dial when it comes, not at the bound.
const dialLimit = 30 * time.Second

// Each member of an ensemble resumes the TLS session it issued, when the
// members share a name (one IP address here, as a certificate's one name
// would be): a session is good only with its issuer, which crypto/tls,
// keying sessions by name, would offer the other member and then replace.
// The members are crypto/tls servers with TLS 1.2 (ZooKeeper 3.8's) and
// ticket keys of their own, as each JVM has; a foreign ticket gets a full
// handshake from them, as from ZooKeeper.
func TestEachServerResumesItsOwnTLSSession(t *testing.T) {
	t.Parallel()
	pki, err := zktest.NewPKI(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	server, err := pki.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	type member struct {
		addr    string
		resumed chan bool // per connection, once its handshake is done
	}
	var members []member
	for range 2 {
		conf := server.Clone() // ticket keys of its own, as each JVM has
		conf.MaxVersion = tls.VersionTLS12
		ln, err := tls.Listen("tcp", "127.0.0.1:0", conf)
		if err != nil {
			t.Fatal(err)
		}
		m := member{ln.Addr().String(), make(chan bool, 8)}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				tc := c.(*tls.Conn)
				if tc.Handshake() == nil {
					m.resumed <- tc.ConnectionState().DidResume
				}
				_ = c.Close()
			}
		}()
		t.Cleanup(func() { ln.Close(); <-done })
		members = append(members, m)
	}
	l, err := zkconn.New(zkconn.Security{TLS: &zkconn.TLS{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}})
	if err != nil {
		t.Fatal(err)
	}
	dial := l.Wrap(net.DialTimeout)
	for i, want := range []bool{false, false, true, true, true} {
		m := members[i%2]
		c, err := dial("tcp", m.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
		select {
		case got := <-m.resumed:
			if got != want {
				t.Errorf("connection %d, to member %d: resumed %v, want %v", i+1, i%2+1, got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("connection %d: member %d saw no handshake", i+1, i%2+1)
		}
	}
}
