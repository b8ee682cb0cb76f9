package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/gracekit/gracekit/zktest"
)

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, msg string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return line, err
}

func TestProxyForwardsCutsAndHeals(t *testing.T) {
	p, err := newZKProxy([]string{echoServer(t)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	addr := p.ConnectString()

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "hello"); err != nil || got != "hello\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}

	p.Cut()
	if _, err := roundTrip(c, "again"); err == nil {
		t.Error("a connection open at the cut still works")
	}
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := roundTrip(c2, "during"); err == nil {
		t.Error("a connection made during the cut works")
	}

	p.Heal()
	c3, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, "healed"); err != nil || got != "healed\n" {
		t.Errorf("after the heal: %q, %v", got, err)
	}
}

func TestProxyClosesTheClientWhenTheMemberIsDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // nothing listens there now
	p, err := newZKProxy([]string{down}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(c, "anyone"); err == nil {
		t.Error("a connection to a member that is down works")
	}
}

func TestProxyExpireWithoutSessionFails(t *testing.T) {
	p, err := newZKProxy([]string{echoServer(t)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Expire("127.0.0.1:1", 0x1234); err == nil {
		t.Error("Expire of a session whose handshake it never saw succeeded")
	}
	p.Close() // twice is fine
}

func TestProxyBlackholeDropsBytesAndTheHealClosesWhatWasOpen(t *testing.T) {
	p, err := newZKProxy([]string{echoServer(t)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "hello"); err != nil || got != "hello\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.Blackhole()
	if _, err := io.WriteString(c, "lost\n"); err != nil {
		t.Fatal(err)
	}
	// Wait until the proxy has dropped the line (and marked c).
	for deadline := time.Now().Add(5 * time.Second); ; {
		p.mu.Lock()
		n := len(p.holed)
		p.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the proxy never read the line sent while blackholed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.Heal()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if len(b) != 0 || err != nil {
		t.Errorf("after the heal the connection read %q, %v; want it closed with nothing (the line dropped)", b, err)
	}
	c2, err := net.Dial("tcp", p.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := roundTrip(c2, "healed"); err != nil || got != "healed\n" {
		t.Errorf("after the heal: %q, %v", got, err)
	}
}

// A delayed proxy forwards every byte, in order, d after it came each
// way: a round trip takes at least 2d.
func TestProxyDelayIsARoundTripOfTwice(t *testing.T) {
	p, err := newZKProxy([]string{echoServer(t)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const d = 100 * time.Millisecond
	p.SetDelay(d)
	c, err := net.Dial("tcp", p.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, msg := range []string{"one", "two"} {
		start := time.Now()
		got, err := roundTrip(c, msg)
		if err != nil || got != msg+"\n" {
			t.Fatalf("through the delayed proxy: %q, %v", got, err)
		}
		if took := time.Since(start); took < 2*d {
			t.Errorf("a round trip took %v, want at least %v", took, 2*d)
		}
	}
}

// lostReplyConn is a go-zookeeper connection to a real server through a
// proxy, with a session timeout of 2 s (its read timeout 1.33 s).
func lostReplyConn(t *testing.T) (*zkProxy, *zk.Conn) {
	t.Helper()
	srv := zktest.New(t)
	p, err := newZKProxy([]string{srv.ConnectString()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	conn, events, err := zk.Connect([]string{p.ConnectString()}, 2*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	for deadline := time.After(10 * time.Second); conn.State() != zk.StateHasSession; {
		select {
		case <-events:
		case <-deadline:
			t.Fatal("no session through the proxy within 10 s")
		}
	}
	return p, conn
}

// A lost reply with the connection kept up: the server made the node,
// the pings' answers and later replies still flow, and the create waits
// for as long as the connection lives.
func TestProxyLosesAReplyAndKeepsTheConnection(t *testing.T) {
	p, conn := lostReplyConn(t)
	p.LoseReply(zkOps["createContainer"], 1, 0)
	done := make(chan error, 1)
	go func() {
		_, err := conn.CreateContainer("/lost", nil, zk.FlagContainer, zk.WorldACL(zk.PermAll))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the create whose reply was lost returned %v within 3 s (twice the read timeout)", err)
	case <-time.After(3 * time.Second):
	}
	ok, _, err := conn.Exists("/lost")
	if err != nil || !ok {
		t.Fatalf("exists /lost on the same connection: %v, %v; want the node the lost create made", ok, err)
	}
	lost := p.Disarm()
	if len(lost) != 1 || lost[0].Op != "createContainer" {
		t.Fatalf("lost %+v, want one createContainer", lost)
	}
	p.Cut() // the lost call ends with its connection
	select {
	case err := <-done:
		if !errors.Is(err, zk.ErrConnectionClosed) {
			t.Errorf("the lost create ended with %v, want %v", err, zk.ErrConnectionClosed)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the lost create did not end within 5 s of its connection's cut")
	}
	p.Heal()
}

// A silent loss: after the dropped reply nothing reaches the client, so
// its read timeout ends the connection and the call fails.
func TestProxyLosesAReplyAndGoesSilent(t *testing.T) {
	p, conn := lostReplyConn(t)
	p.LoseReply(zkOps["create"], 1, 10*time.Second)
	start := time.Now()
	_, err := conn.Create("/silent", nil, 0, zk.WorldACL(zk.PermAll))
	if !errors.Is(err, zk.ErrConnectionClosed) {
		t.Fatalf("the create whose reply was lost, silent, returned %v after %v, want %v", err, time.Since(start), zk.ErrConnectionClosed)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("it took %v, more than twice the client's read timeout", took)
	}
	if lost := p.Disarm(); len(lost) != 1 || lost[0].Op != "create" {
		t.Errorf("lost %+v, want one create", lost)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		ok, _, err := conn.Exists("/silent")
		if err == nil {
			if !ok {
				t.Error("/silent is missing: the request was not forwarded")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exists after the reconnect: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Over TLS (-zk-tls) the proxy terminates TLS both ways and still reads
// the frames: a client with the PKI's certificate gets a session through
// it, a plaintext one does not, a reply is lost, the member lists the
// session (expireAll's check), and the recorder expires it on the
// member's secureClientPort.
func TestProxyOverTLSReadsFramesAndExpiresSessions(t *testing.T) {
	sec, err := newZKSecurity(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := zktest.New(t, zktest.TLS(sec.pki)).Servers[0]
	member := srv.SecureAddr()
	p, err := newZKProxy([]string{member}, &proxyTLS{server: sec.server, dial: sec.dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)

	plain, _, err := zk.Connect([]string{p.ConnectString()}, 2*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := plain.Exists("/"); err == nil {
		t.Error("a plaintext client got an answer through the TLS proxy")
	}
	plain.Close()

	conn, events, err := zk.Connect([]string{p.ConnectString()}, 2*time.Second, zk.WithLogInfo(false), zk.WithDialer(sec.dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	for deadline := time.After(10 * time.Second); conn.State() != zk.StateHasSession; {
		select {
		case <-events:
		case <-deadline:
			t.Fatal("no session through the TLS proxy within 10 s")
		}
	}

	p.LoseReply(zkOps["create"], 1, 0)
	done := make(chan error, 1)
	go func() {
		_, err := conn.Create("/lost-tls", nil, 0, zk.WorldACL(zk.PermAll))
		done <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if ok, _, err := conn.Exists("/lost-tls"); err == nil && ok {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("exists /lost-tls: %v, %v; want the node the lost create made", ok, err)
		}
	}
	if lost := p.Disarm(); len(lost) != 1 || lost[0].Op != "create" {
		t.Fatalf("lost %+v, want one create", lost)
	}
	p.Cut() // the lost create ends with its connection
	if err := <-done; !errors.Is(err, zk.ErrConnectionClosed) {
		t.Errorf("the lost create ended with %v, want %v", err, zk.ErrConnectionClosed)
	}
	p.Heal()

	id := conn.SessionID()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) { // reconnected after the cut
		live, err := srv.Sessions()
		if err == nil && slices.Contains(live, id) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the member lists sessions %x (%v), want 0x%x among them", live, err, id)
		}
	}
	if err := p.Expire(member, id); err != nil {
		t.Fatalf("expire 0x%x over TLS: %v", id, err)
	}
	for deadline := time.After(10 * time.Second); ; {
		select {
		case ev := <-events:
			if ev.State == zk.StateExpired {
				return
			}
		case <-deadline:
			t.Fatal("the session did not expire within 10 s")
		}
	}
}
