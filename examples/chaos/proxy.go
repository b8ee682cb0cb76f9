package main

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/gracekit/gracekit/examples/internal/zktls"
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
//
// Over TLS (-zk-tls, proxyTLS) it terminates TLS both ways, as a sidecar
// holding the PKI would: so that it can read the frames, it serves its
// clients with the servers' certificate, requiring a client certificate,
// and dials the members' secureClientPorts with the client one.
type zkProxy struct {
	rec       *zktest.SessionRecorder
	tls       *tls.Config // the listeners' side; nil for plaintext
	lns       []net.Listener
	upstreams []string

	mu       sync.Mutex
	cut      bool
	hole     bool                  // blackholed: bytes are dropped, nothing is closed
	holed    map[net.Conn]struct{} // connections open while blackholed: closed at the heal
	conns    map[net.Conn]struct{}
	sessions map[int64]bool // every session a handshake through the proxy named
	redirect string         // every new connection goes there instead; "" for the members (faults.go's stale server)
	delay    time.Duration  // each chunk is forwarded this long after it arrived, both ways (SetDelay)
	loss     *replyLoss     // armed by LoseReply; nil when none
	lost     []LostReply    // replies dropped since the last Disarm
	wg       sync.WaitGroup

	closeOnce sync.Once
}

// proxyTLS is a proxy's TLS: its listeners' and its dialer to the members.
type proxyTLS struct {
	server *tls.Config
	dial   zktls.DialFunc
}

// newZKProxy listens on a loopback port per upstream and forwards to it,
// over TLS both ways when sec is not nil.
func newZKProxy(upstreams []string, sec *proxyTLS) (*zkProxy, error) {
	rec := zktest.NewSessionRecorder()
	var server *tls.Config
	if sec != nil {
		rec, server = zktest.NewSessionRecorderDialer(sec.dial), sec.server
	}
	p := &zkProxy{rec: rec, tls: server, upstreams: upstreams, conns: map[net.Conn]struct{}{},
		holed: map[net.Conn]struct{}{}, sessions: map[int64]bool{}}
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
	if p.holeIn(down) {
		// Blackholed: the client's bytes go nowhere until the heal closes
		// the connection, as a dropped route would look.
		_, _ = io.Copy(io.Discard, down)
		p.untrack(down)
		return
	}
	up, err := p.rec.Dial("tcp", p.upstream(upstream), 2*time.Second)
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
	raw := down
	if p.tls != nil {
		// The handshake runs at the first read, once the member answered
		// (as a member down closes the connection before anything).
		down = tls.Server(raw, p.tls)
	}
	done := make(chan struct{}, 2)
	lc := &lossConn{xids: map[int32]taken{}}
	go func() { p.pipe(up, down, false, lc); done <- struct{}{} }()
	go func() { p.pipe(down, up, true, lc); done <- struct{}{} }()
	<-done // either side ended: end both
	p.untrack(raw, down, up)
	<-done
}

// pipe copies src to dst, dropping what arrives while the proxy is
// blackholed (and marking both ends to be closed at the heal). It splits
// both directions into ZooKeeper packets (zkframe.go): from the client it
// notes the requests whose reply an armed LoseReply takes, and from the
// server it notes the session of the connect response and drops those
// replies (and, silent, every packet after them).
func (p *zkProxy) pipe(dst, src net.Conn, fromServer bool, lc *lossConn) {
	buf := make([]byte, 32*1024)
	var fr framer
	write := func(b []byte) error { _, err := dst.Write(b); return err }
	if d := p.latency(); d > 0 {
		// A slow link: each chunk leaves d after it came, in order.
		type chunk struct {
			b   []byte
			due time.Time
		}
		ch := make(chan chunk, 256)
		defer close(ch)
		go func() {
			failed := false
			for c := range ch {
				if failed {
					continue
				}
				time.Sleep(time.Until(c.due))
				if _, err := dst.Write(c.b); err != nil {
					failed = true
					dst.Close()
				}
			}
		}()
		write = func(b []byte) error {
			ch <- chunk{b: append([]byte(nil), b...), due: time.Now().Add(d)}
			return nil
		}
	}
	for {
		n, err := src.Read(buf)
		if n > 0 {
			out := buf[:n]
			if fromServer {
				out = p.fromServer(&fr, out, lc, src)
			} else {
				p.fromClient(&fr, out, lc)
			}
			if len(out) > 0 && !p.holeIn(src, dst) {
				if werr := write(out); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// fromClient notes the requests of b whose reply an armed loss takes.
// The bytes go on as they came: a request is never held back.
func (p *zkProxy) fromClient(fr *framer, b []byte, lc *lossConn) {
	first := fr.seen == 0
	packets, _ := fr.feed(b)
	for i, pk := range packets {
		if first && i == 0 {
			continue // the handshake
		}
		xid, op, ok := requestHeader(pk)
		if !ok || xid < 0 {
			continue
		}
		if hold, take := p.takeLoss(op); take {
			lc.mu.Lock()
			lc.xids[xid] = taken{op: op, hold: hold}
			lc.mu.Unlock()
		}
	}
}

// fromServer is what of b goes on to the client: whole packets, minus the
// replies a loss took (and, once a silent loss dropped one, nothing more:
// src, the member's end, is closed after the loss's hold).
func (p *zkProxy) fromServer(fr *framer, b []byte, lc *lossConn, src net.Conn) []byte {
	first := fr.seen == 0
	packets, raw := fr.feed(b)
	var out []byte
	for i, pk := range packets {
		if first && i == 0 {
			p.noteSession(connectSession(pk))
			out = append(out, pk...)
			continue
		}
		xid, _, _, _ := replyHeader(pk)
		lc.mu.Lock()
		tk, lose := lc.xids[xid]
		delete(lc.xids, xid)
		silent := lc.silent
		if lose && tk.hold > 0 {
			lc.silent = true
		}
		lc.mu.Unlock()
		if silent {
			continue
		}
		if lose {
			p.dropped(tk.op, xid)
			if tk.hold > 0 {
				_ = src.SetReadDeadline(time.Now().Add(tk.hold))
			}
			continue
		}
		out = append(out, pk...)
	}
	return append(out, raw...) // bytes past a broken framing come after its last packet
}

// replyLoss is an armed LoseReply: the replies of the next n requests
// of opcode op are dropped; hold > 0 makes the connection silent after
// the drop, and closes it hold later.
type replyLoss struct {
	op   int32
	n    int
	hold time.Duration
}

// lossConn is one forwarded connection's requests whose reply is to be
// dropped (xid to opcode), shared by its two pipes.
type lossConn struct {
	mu     sync.Mutex
	xids   map[int32]taken
	silent bool // a silent loss dropped a reply: nothing more reaches the client
}

// taken is a request whose reply is to be dropped.
type taken struct {
	op   int32
	hold time.Duration // the loss's hold
}

// LostReply is a reply the proxy dropped.
type LostReply struct {
	Op  string
	Xid int32
	At  time.Time
}

// LoseReply makes the proxy drop the replies of the next n requests of
// opcode op (zkOps), on any of its connections, while forwarding the
// requests themselves: the server acts on them and the client never
// hears. With hold 0 every other packet still flows, pings' answers
// included, so the connection stays up and only the caller's own bound
// ends its wait; with hold > 0 the connection goes silent after the drop
// and is closed hold later (the client's read timeout usually ends it
// first). It replaces a loss armed before.
func (p *zkProxy) LoseReply(op int32, n int, hold time.Duration) {
	p.mu.Lock()
	p.loss = &replyLoss{op: op, n: n, hold: hold}
	p.mu.Unlock()
}

// Disarm ends an armed loss and returns the replies dropped since the
// last Disarm. A request already taken still loses its reply.
func (p *zkProxy) Disarm() []LostReply {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loss = nil
	out := p.lost
	p.lost = nil
	return out
}

// takeLoss tells whether a request of opcode op is to lose its reply,
// counting it against the armed loss, and the loss's hold.
func (p *zkProxy) takeLoss(op int32) (hold time.Duration, take bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loss == nil || p.loss.op != op || p.loss.n <= 0 {
		return 0, false
	}
	p.loss.n--
	return p.loss.hold, true
}

// dropped notes a reply dropped.
func (p *zkProxy) dropped(op, xid int32) {
	p.mu.Lock()
	p.lost = append(p.lost, LostReply{Op: opName(op), Xid: xid, At: time.Now()})
	p.mu.Unlock()
}

// holeIn tells whether the proxy is blackholed, and if so marks cs to be
// closed at the heal.
func (p *zkProxy) holeIn(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.hole {
		return false
	}
	for _, c := range cs {
		p.holed[c] = struct{}{}
	}
	return true
}

func (p *zkProxy) noteSession(id int64) {
	if id == 0 {
		return
	}
	p.mu.Lock()
	p.sessions[id] = true
	p.mu.Unlock()
}

// Sessions lists every session a handshake through the proxy named.
func (p *zkProxy) Sessions() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]int64, 0, len(p.sessions))
	for id := range p.sessions {
		out = append(out, id)
	}
	return out
}

// SetDelay makes the connections made from now on a slow link: every
// byte is forwarded d after it arrived, both ways (the min-up fault's
// operators: a read's answer and the write after it are a round trip
// apart, wide enough for two operators to read before either writes).
func (p *zkProxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

func (p *zkProxy) latency() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

// Blackhole drops every byte both ways, closing nothing, until Heal: the
// client finds out by its own timeouts, as behind a dropped route.
func (p *zkProxy) Blackhole() {
	p.mu.Lock()
	p.hole = true
	p.mu.Unlock()
}

// Expire ends session id, one the provider opened through the proxy, on
// the member at addr (any serving member will do: sessions belong to the
// ensemble). The provider may hold more than one (sd's watch session
// beside the one that owns its node): the caller names the one to end.
func (p *zkProxy) Expire(addr string, id int64) error { return p.rec.Expire(addr, id) }

// Redirect sends every new connection to addr instead of the members, and
// closes the open ones, so that the client reconnects there; "" sends them
// to the members again (closing the redirected ones).
func (p *zkProxy) Redirect(addr string) {
	p.mu.Lock()
	p.redirect = addr
	var cs []net.Conn
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

func (p *zkProxy) upstream(member string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.redirect != "" {
		return p.redirect
	}
	return member
}

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

// Heal lets the client connect again, and closes the connections that
// were open while blackholed (their streams lost bytes).
func (p *zkProxy) Heal() {
	p.mu.Lock()
	p.cut, p.hole = false, false
	holed := p.holed
	p.holed = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range holed {
		c.Close()
	}
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
