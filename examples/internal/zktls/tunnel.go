package zktls

import (
	"io"
	"net"
	"sync"
	"time"
)

// Tunnel listens on a loopback port per server and forwards each
// connection to its server through a dialer (a TLS one, from Wrap): the
// client connects to Addrs in plaintext inside its own process, and only
// the dialer's connections leave it. A failed dial closes the client's
// connection, which its client takes as a server down and retries.
type Tunnel struct {
	lns []net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // nil once closed
	wg     sync.WaitGroup
	closed sync.Once
}

// dialTimeout bounds each forwarded connection's dial, TLS handshake
// included (Wrap gives the handshake MinHandshake at least).
const dialTimeout = 2 * time.Second

// NewTunnel listens for each of servers and forwards through dial.
func NewTunnel(servers []string, dial DialFunc) (*Tunnel, error) {
	t := &Tunnel{conns: map[net.Conn]struct{}{}}
	for _, s := range servers {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Close()
			return nil, err
		}
		t.lns = append(t.lns, ln)
		t.wg.Add(1)
		go t.accept(ln, s, dial)
	}
	return t, nil
}

// Addrs are the tunnel's addresses, in the servers' order.
func (t *Tunnel) Addrs() []string {
	out := make([]string, len(t.lns))
	for i, ln := range t.lns {
		out[i] = ln.Addr().String()
	}
	return out
}

func (t *Tunnel) accept(ln net.Listener, server string, dial DialFunc) {
	defer t.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed
		}
		if !t.track(c) {
			c.Close()
			return
		}
		t.wg.Add(1)
		go t.forward(c, server, dial)
	}
}

func (t *Tunnel) forward(down net.Conn, server string, dial DialFunc) {
	defer t.wg.Done()
	up, err := dial("tcp", server, dialTimeout)
	if err != nil || !t.track(up) {
		if up != nil {
			up.Close()
		}
		t.untrack(down)
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, down); done <- struct{}{} }()
	go func() { _, _ = io.Copy(down, up); done <- struct{}{} }()
	<-done // either side ended: end both
	t.untrack(down, up)
	<-done
}

func (t *Tunnel) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conns == nil {
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *Tunnel) untrack(cs ...net.Conn) {
	t.mu.Lock()
	for _, c := range cs {
		delete(t.conns, c)
	}
	t.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// Close stops listening, closes every connection and waits for the
// tunnel's goroutines. It may be called more than once.
func (t *Tunnel) Close() {
	t.closed.Do(func() {
		for _, ln := range t.lns {
			ln.Close()
		}
		t.mu.Lock()
		cs := t.conns
		t.conns = nil
		t.mu.Unlock()
		for c := range cs {
			c.Close()
		}
		t.wg.Wait()
	})
}
