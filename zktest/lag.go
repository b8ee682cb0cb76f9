package zktest

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
)

// Isolatable makes an ensemble whose members reach each other's quorum
// port through links inside the test process (each member's config names
// a link per peer), so that Isolate can cut one member off from the
// others while its clients still reach it. A follower cut off so keeps
// answering reads from its state, which falls behind the ensemble's, until
// syncLimit ticks pass without its leader (2 s at DefaultTickTime); then
// it stops serving until Rejoin.
func Isolatable() Option {
	return optionFunc(func(o *options) error {
		o.isolatable = true
		return nil
	})
}

// StaleCopy is CopyOf for a program that is not a test: the copy's data
// is under dir, and the caller must Close it.
func (c *Cluster) StaleCopy(dir string, s *Server) (*Cluster, error) { return c.copyOf(dir, s) }

// peerLinks are an Isolatable ensemble's links: links[i][j] carries member
// i+1's connections to member j+1's quorum port.
type peerLinks struct {
	links [][]*link
}

func newPeerLinks(servers []*Server) (*peerLinks, error) {
	pl := &peerLinks{links: make([][]*link, len(servers))}
	for i := range servers {
		pl.links[i] = make([]*link, len(servers))
		for j, to := range servers {
			if i == j {
				continue
			}
			l, err := newLink(net.JoinHostPort("127.0.0.1", strconv.Itoa(to.peerPort)))
			if err != nil {
				pl.close()
				return nil, err
			}
			pl.links[i][j] = l
		}
	}
	return pl, nil
}

// port is the port member from's config names for member to's quorum port.
func (pl *peerLinks) port(from, to *Server) int {
	if pl == nil || from.ID == to.ID {
		return to.peerPort
	}
	return pl.links[from.ID-1][to.ID-1].port()
}

func (pl *peerLinks) each(fn func(i, j int, l *link)) {
	for i, row := range pl.links {
		for j, l := range row {
			if l != nil {
				fn(i, j, l)
			}
		}
	}
}

func (pl *peerLinks) close() { pl.each(func(_, _ int, l *link) { l.close() }) }

// Isolate cuts s off from every other member's quorum links, both ways:
// their bytes are dropped and nothing is closed, as behind a dropped route.
// Its clients still reach it.
func (c *Cluster) Isolate(s *Server) error {
	if c.links == nil {
		return errors.New("zktest: Isolate needs an ensemble started with Isolatable()")
	}
	c.links.each(func(i, j int, l *link) {
		if i == s.ID-1 || j == s.ID-1 {
			l.setHole(true)
		}
	})
	return nil
}

// Rejoin ends Isolate: the links carry bytes again, and the connections
// that lost bytes are closed, so that the members reconnect.
func (c *Cluster) Rejoin(s *Server) {
	if c.links == nil {
		return
	}
	c.links.each(func(i, j int, l *link) {
		if i == s.ID-1 || j == s.ID-1 {
			l.setHole(false)
		}
	})
}

// link forwards connections to one address; while holed it drops every
// byte both ways.
type link struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	hole  bool
	holed map[net.Conn]struct{}
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newLink(target string) (*link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("zktest: %w", err)
	}
	l := &link{ln: ln, target: target, holed: map[net.Conn]struct{}{}, conns: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

func (l *link) port() int { return l.ln.Addr().(*net.TCPAddr).Port }

func (l *link) accept() {
	defer l.wg.Done()
	for {
		down, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.wg.Add(1)
		go l.forward(down)
	}
}

func (l *link) track(cs ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conns == nil {
		return false
	}
	for _, c := range cs {
		l.conns[c] = struct{}{}
	}
	return true
}

func (l *link) forward(down net.Conn) {
	defer l.wg.Done()
	up, err := net.Dial("tcp", l.target)
	if err != nil {
		down.Close()
		return
	}
	if !l.track(down, up) {
		down.Close()
		up.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { l.pipe(up, down); done <- struct{}{} }()
	go func() { l.pipe(down, up); done <- struct{}{} }()
	<-done
	down.Close()
	up.Close()
	<-done
	l.mu.Lock()
	delete(l.conns, down)
	delete(l.conns, up)
	delete(l.holed, down)
	delete(l.holed, up)
	l.mu.Unlock()
}

func (l *link) pipe(dst, src net.Conn) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			l.mu.Lock()
			hole := l.hole
			if hole {
				l.holed[src], l.holed[dst] = struct{}{}, struct{}{}
			}
			l.mu.Unlock()
			if !hole {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return // EOF or closed: forward closes both ends
		}
	}
}

func (l *link) setHole(on bool) {
	l.mu.Lock()
	l.hole = on
	var cs []net.Conn
	if !on {
		for c := range l.holed {
			cs = append(cs, c)
		}
		clear(l.holed)
	}
	l.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

func (l *link) close() {
	l.ln.Close()
	l.mu.Lock()
	cs := l.conns
	l.conns = nil
	l.mu.Unlock()
	for c := range cs {
		c.Close()
	}
	l.wg.Wait()
}
