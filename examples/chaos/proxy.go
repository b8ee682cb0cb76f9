package main

import (
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/gracekit/gracekit/zktest"
)

// zkProxy stands between one provider and the ensemble: one loopback
// listener per member, each forwarding to that member, so that the
// provider's connect string lists the proxy's addresses and its client
// fails over between members as it would without the proxy.
//
// The proxy dials the members through a zktest.SessionRecorder, which
// notes the session id and password of every handshake, so that
// Expire can end the provider's session; Cut closes every forwarded
// connection and refuses new ones until Heal, as a network partition of
// that one provider would. (zktest.Partition is a dialer of its own and
// cannot wrap the recorder's; the proxy does the same cut itself.)
type zkProxy struct {
	rec       *zktest.SessionRecorder
	lns       []net.Listener
	upstreams []string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup

	closeOnce sync.Once
}

// newZKProxy listens on a loopback port per upstream and forwards to it.
func newZKProxy(upstreams []string) (*zkProxy, error) {
	p := &zkProxy{rec: zktest.NewSessionRecorder(), upstreams: upstreams, conns: map[net.Conn]struct{}{}}
	for _, up := range upstreams {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			p.Close()
			return nil, err
		}
		p.lns = append(p.lns, ln)
		p.wg.Add(1)
		go p.accept(ln, up)
	}
	return p, nil
}

// ConnectString lists the proxy's addresses, one per member, in the
// members' order.
func (p *zkProxy) ConnectString() string {
	addrs := make([]string, len(p.lns))
	for i, ln := range p.lns {
		addrs[i] = ln.Addr().String()
	}
	return strings.Join(addrs, ",")
}

func (p *zkProxy) accept(ln net.Listener, upstream string) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.forward(c, upstream)
	}
}

// track adds c to the open connections unless the proxy is cut.
func (p *zkProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut || p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *zkProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	for _, c := range cs {
		delete(p.conns, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

func (p *zkProxy) forward(down net.Conn, upstream string) {
	defer p.wg.Done()
	up, err := p.rec.Dial("tcp", upstream, 2*time.Second)
	if err != nil {
		// The member is down: the client sees its connection closed and
		// tries the next address, as it would on a refused connection.
		p.untrack(down)
		return
	}
	if !p.track(up) {
		p.untrack(down, up)
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, down)
	go pipe(down, up)
	<-done // either side ended: end both
	p.untrack(down, up)
	<-done
}

// Expire ends session id, one the provider opened through the proxy, on
// the member at addr (any serving member will do: sessions belong to the
// ensemble). The provider may hold more than one (sd's watch session
// beside the one that owns its node): the caller names the one to end.
func (p *zkProxy) Expire(addr string, id int64) error { return p.rec.Expire(addr, id) }

// Cut closes every forwarded connection and refuses new ones until Heal.
func (p *zkProxy) Cut() {
	p.mu.Lock()
	p.cut = true
	var cs []net.Conn
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// Heal lets the provider connect again.
func (p *zkProxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines. It is idempotent.
func (p *zkProxy) Close() {
	p.closeOnce.Do(func() {
		for _, ln := range p.lns {
			ln.Close()
		}
		p.mu.Lock()
		cs := p.conns
		p.conns = nil
		p.mu.Unlock()
		for c := range cs {
			c.Close()
		}
		p.wg.Wait()
	})
}
