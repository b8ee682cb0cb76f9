package zktest

import (
	"errors"
	"net"
	"sync"
	"time"
)

// ErrPartitioned is what a Partition's dialer returns while it is cut.
var ErrPartitioned = errors.New("zktest: partitioned")

// Partition is a dialer for go-zookeeper's zk.WithDialer (or sd.Dialer)
// that a test can cut off from the servers and heal, as a network
// partition of that one client would: Cut closes its open connections and
// refuses new ones until Heal. Its methods are safe for concurrent use.
type Partition struct {
	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

// NewPartition returns a healed Partition.
func NewPartition() *Partition { return &Partition{conns: map[net.Conn]struct{}{}} }

// Dial has the shape of zk.Dialer.
func (p *Partition) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	if cut {
		return nil, ErrPartitioned
	}
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		c.Close()
		return nil, ErrPartitioned
	}
	p.conns[c] = struct{}{}
	return &partitionConn{Conn: c, p: p}, nil
}

// Cut closes the client's connections and refuses new ones.
func (p *Partition) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Heal lets the client connect again.
func (p *Partition) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

type partitionConn struct {
	net.Conn
	p *Partition
}

func (c *partitionConn) Close() error {
	c.p.mu.Lock()
	delete(c.p.conns, c.Conn)
	c.p.mu.Unlock()
	return c.Conn.Close()
}
