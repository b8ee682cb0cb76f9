package zkwire

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gracekit/gracekit/internal/proptrace"
)

// Conn is a small ZooKeeper client over one connection and one session of
// its own, for what go-zookeeper v1.0.4 cannot send (addWatch) and has no
// hook to send: the handshake (with digest auth), requests matched to their
// replies by xid, pings, and notifications handed to a callback in the
// order they arrived. It never reconnects: when the connection fails, Done
// is closed and the Conn is spent; its owner dials a new one.
//
// Paths are the server's: a chroot is the caller's to prepend.
type Conn struct {
	nc      net.Conn
	addr    string
	timeout time.Duration // negotiated
	session int64
	passwd  []byte
	onEvent func(seq uint64, ev WatcherEvent)

	wmu sync.Mutex // one frame at a time

	mu      sync.Mutex
	xid     int32
	pending map[int32]chan Reply
	err     error

	done chan struct{} // closed when the connection failed or was closed
	wg   sync.WaitGroup
	once sync.Once

	frames   sync.Pool     // large reply frames given back by Reply.Release
	closing  atomic.Bool   // Close began: the server's hang-up is ErrClosed
	lastZxid atomic.Int64  // the highest zxid seen (see LastZxid)
	pingNow  chan struct{} // a deletion was heard: ping for its zxid (see read)
}

// Reply is a reply to a request: its header, its body (after the
// header), and its place in the stream (see Config.OnEvent).
type Reply struct {
	Header ReplyHeader
	Body   []byte
	Seq    uint64

	frame *[]byte // the frame Body is in, when it may be given back
	c     *Conn
}

// Release gives the reply's frame back for a later reply to be read into:
// a bulk load reads megabytes of replies, and allocating each anew runs the
// garbage collector several times a load. Body, and every slice of it,
// must not be used after. Optional: a reply not released is collected.
func (r *Reply) Release() {
	if r.frame != nil {
		r.c.frames.Put(r.frame)
		r.frame, r.Body = nil, nil
	}
}

// poolMin is the smallest frame worth keeping for reuse: below it a fresh
// allocation is as cheap.
const poolMin = 32 << 10

// readFrame is ReadFrame into a frame given back by Release when one is
// large enough; frame is set when the result may be given back.
func (c *Conn) readFrame(r io.Reader) (b []byte, frame *[]byte, err error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > MaxFrame {
		return nil, nil, fmt.Errorf("zkwire: frame of %d bytes is over %d", size, MaxFrame)
	}
	if size >= poolMin {
		if f, ok := c.frames.Get().(*[]byte); ok && cap(*f) >= int(size) {
			frame = f
		} else {
			buf := make([]byte, size, size+size/4) // room for a slightly larger next one
			frame = &buf
		}
		b = (*frame)[:size]
	} else {
		b = make([]byte, size)
	}
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, nil, err
	}
	return b, frame, nil
}

// Auth is credentials sent after the handshake, e.g. {"digest", "user:pw"}.
type Auth struct {
	Scheme string
	Data   []byte
}

// Config is what Dial needs.
type Config struct {
	Addr           string
	Dial           func(network, address string, timeout time.Duration) (net.Conn, error) // nil: net.DialTimeout
	SessionTimeout time.Duration
	// HandshakeTimeout bounds the dial, the handshake and the auth (0: the
	// session timeout). A server that accepts connections while it starts
	// may never answer a handshake: ZooKeeper's Java client gives each
	// server the session timeout shared among the servers, and tries the
	// next.
	HandshakeTimeout time.Duration
	Auth             []Auth
	// Session and Passwd resume a session (a Conn's SessionID and Passwd)
	// instead of creating one: a logged transaction on the ensemble, and
	// the server keeps the old one until it expires. 0 creates one.
	Session int64
	Passwd  []byte
	// LastZxid is the highest zxid the caller has seen, on this session
	// or any before it (a Conn's LastZxid): the handshake sends it, and a
	// server whose own last zxid is lower, one behind what the caller
	// already read, refuses the connection (it closes it, and Dial
	// returns that error), so that the caller tries another server.
	// ZooKeeper's own clients send it for the same reason. 0 for none.
	LastZxid int64
	// OnEvent receives each notification with its place in the stream:
	// seq counts every frame read, so a Reply with a larger Seq was sent by
	// the server after the notification. It is called from the Conn's read
	// goroutine and must not block.
	OnEvent func(seq uint64, ev WatcherEvent)
}

// SendZxid is the lastZxidSeen a handshake sends for a client that has
// seen zxid seen, for handshakes that Dial does not write (sd raises
// go-zookeeper's with it).
func SendZxid(seen int64) int64 { return zxidToSend(seen) }

// ErrClosed is a call on a Conn that failed or was closed.
var ErrClosed = errors.New("zkwire: connection closed")

// ErrRefused is Dial's error when the server closed the connection at the
// handshake: as a server behind Config.LastZxid does, or one not serving.
var ErrRefused = errors.New("zkwire: the server closed the connection at the handshake")

// ErrSessionExpired is Dial's error when the server no longer holds the
// session asked to resume (Config.Session): dial again without it.
var ErrSessionExpired = errors.New("zkwire: the session to resume has expired")

// Dial connects, makes a new session (or resumes Config.Session) and
// authenticates, all within ctx and the session timeout, and starts the
// Conn's read and ping goroutines.
func Dial(ctx context.Context, cfg Config) (*Conn, error) {
	timeout := cfg.SessionTimeout
	if cfg.HandshakeTimeout > 0 && cfg.HandshakeTimeout < timeout {
		timeout = cfg.HandshakeTimeout
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return nil, context.DeadlineExceeded
	}
	var nc net.Conn
	var err error
	if cfg.Dial != nil {
		nc, err = cfg.Dial("tcp", cfg.Addr, timeout)
	} else {
		// DialContext: a Close of the owner ends a dial to a server that
		// drops SYNs at once, not at the timeout.
		nc, err = (&net.Dialer{Timeout: timeout}).DialContext(ctx, "tcp", cfg.Addr)
	}
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	defer stop()
	_ = nc.SetDeadline(time.Now().Add(timeout))
	br := bufio.NewReaderSize(nc, 64<<10)
	fail := func(err error) (*Conn, error) {
		_ = nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if err := WriteFrame(nc, ConnectRequestAt(zxidToSend(cfg.LastZxid), cfg.SessionTimeout, cfg.Session, cfg.Passwd)); err != nil {
		return fail(err)
	}
	b, err := ReadFrame(br)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// What a server behind the zxid sent answers, among others
			// (one not serving yet closes it too).
			err = fmt.Errorf("%w: %s (lastZxidSeen %#x; a server behind it refuses it so): %w", ErrRefused, cfg.Addr, cfg.LastZxid, err)
		}
		return fail(err)
	}
	cr, err := ParseConnectResponse(b)
	if err != nil {
		return fail(err)
	}
	if cr.SessionID == 0 || cr.Timeout <= 0 {
		if cfg.Session != 0 {
			return fail(ErrSessionExpired)
		}
		return fail(errors.New("zkwire: the server refused a session"))
	}
	for _, a := range cfg.Auth {
		if err := WriteFrame(nc, Request(XidAuth, OpSetAuth, AuthBody(a.Scheme, a.Data))); err != nil {
			return fail(err)
		}
		b, err := ReadFrame(br)
		if err != nil {
			return fail(err)
		}
		h, _, err := ParseReplyHeader(b)
		if err != nil {
			return fail(err)
		}
		if h.Xid != XidAuth {
			return fail(fmt.Errorf("zkwire: reply %d to the auth request", h.Xid))
		}
		if h.Err != 0 {
			return fail(fmt.Errorf("zkwire: %s auth: %w", a.Scheme, &Error{h.Err}))
		}
	}
	_ = nc.SetDeadline(time.Time{})
	c := &Conn{
		nc: nc, addr: cfg.Addr, timeout: cr.Timeout, session: cr.SessionID, passwd: cr.Passwd, onEvent: cfg.OnEvent,
		pending: map[int32]chan Reply{}, done: make(chan struct{}), pingNow: make(chan struct{}, 1),
	}
	c.lastZxid.Store(max(cfg.LastZxid, 0))
	c.wg.Add(2)
	go c.read(br)
	go c.ping()
	return c, nil
}

// SessionID is the Conn's session.
func (c *Conn) SessionID() int64 { return c.session }

// Addr is the server the Conn is connected to.
func (c *Conn) Addr() string { return c.addr }

// Passwd is the session's password, to resume it (Config.Passwd).
func (c *Conn) Passwd() []byte { return c.passwd }

// Timeout is the session timeout the server granted.
func (c *Conn) Timeout() time.Duration { return c.timeout }

// LastZxid is the highest zxid the Conn has seen: Config.LastZxid, or
// a later one from a reply's header (the server's last zxid when it
// answered), a ping's included. Java's client leaves pings out; they count
// here because a notification carries no zxid (ZOOKEEPER-4655), so a
// session that only heard of a deletion would otherwise still resume on a
// server behind it. A ping's reply follows every notification of the
// transactions its zxid covers, on the same ordered connection, so it
// claims nothing the Conn has not been told. It is updated before the
// reply is handed to its caller and before the notification to OnEvent.
// Pass it to the next Dial's Config.LastZxid.
func (c *Conn) LastZxid() int64 { return c.lastZxid.Load() }

// seen notes zxid (not a zxid when 0 or less). Only the read goroutine
// stores.
func (c *Conn) seen(zxid int64) {
	if zxid > c.lastZxid.Load() {
		c.lastZxid.Store(zxid)
	}
}

// Drop closes the connection without ending the session, which a Dial
// with its SessionID and Passwd may resume until it expires, and waits
// for the Conn's goroutines. Close after Drop does nothing more.
func (c *Conn) Drop() {
	c.once.Do(func() { c.fail(ErrClosed) })
	c.wg.Wait()
}

// Done is closed once the Conn is spent.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the Conn is spent (nil while it is not).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Do sends a request and waits for its reply, ctx or the end of the Conn.
// A non-zero error code in the reply is returned as an *Error along with
// the Reply. Do is safe for concurrent use.
func (c *Conn) Do(ctx context.Context, op int32, body []byte) (Reply, error) {
	return c.Send(op, body).Wait(ctx)
}

// Call is a request sent and not yet waited for.
type Call struct {
	c   *Conn
	xid int32
	ch  chan Reply
	err error // the Conn was spent before the request went out
}

// Send writes a request and returns at once, so that several go out back
// to back: the server answers a session's requests in the order sent, so
// a read sent after addWatch sees the state the watch covers. Wait for
// the reply exactly once.
func (c *Conn) Send(op int32, body []byte) *Call {
	return c.SendAll(Req{Op: op, Body: body})[0]
}

// Req is one request of SendAll.
type Req struct {
	Op   int32
	Body []byte
}

// SendAll sends reqs in order, in one Write: a load's requests go out
// together, as one request would, instead of each waking the server on
// its own while the next is still written. Wait for each reply once.
func (c *Conn) SendAll(reqs ...Req) []*Call {
	calls := make([]*Call, len(reqs))
	c.mu.Lock()
	for i := range reqs {
		calls[i] = &Call{c: c, ch: make(chan Reply, 1), err: c.err}
		if c.err != nil {
			continue
		}
		c.xid++
		if c.xid <= 0 {
			c.xid = 1
		}
		calls[i].xid = c.xid
		c.pending[c.xid] = calls[i].ch
	}
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return calls
	}
	size := 0
	for _, r := range reqs {
		size += 12 + len(r.Body)
	}
	// One buffer, not writev: a Dialer's wrapping conn would get a Write
	// per piece.
	b := make([]byte, 0, size)
	for i, r := range reqs {
		b = appendFrame(b, calls[i].xid, r.Op, r.Body)
	}
	if err := c.write(b); err != nil {
		c.fail(err)
	}
	return calls
}

// appendFrame appends a request frame: its length, RequestHeader{xid,
// op} and the body.
func appendFrame(b []byte, xid, op int32, body []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(8+len(body)))
	b = binary.BigEndian.AppendUint32(b, uint32(xid))
	b = binary.BigEndian.AppendUint32(b, uint32(op))
	return append(b, body...)
}

func (c *Conn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.timeout))
	_, err := c.nc.Write(b)
	return err
}

// Wait waits for the Call's reply, ctx or the end of the Conn. A non-zero
// error code in the reply is returned as an *Error along with the Reply.
func (call *Call) Wait(ctx context.Context) (Reply, error) {
	if call.err != nil {
		return Reply{}, call.err
	}
	select {
	case r, ok := <-call.ch:
		if !ok {
			return Reply{}, call.c.Err()
		}
		if r.Header.Err != 0 {
			return r, &Error{r.Header.Err}
		}
		return r, nil
	case <-ctx.Done():
		call.c.mu.Lock()
		delete(call.c.pending, call.xid)
		call.c.mu.Unlock()
		return Reply{}, ctx.Err()
	}
}

// fail spends the Conn: pending calls end with err.
func (c *Conn) fail(err error) {
	if c.closing.Load() {
		err = ErrClosed
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	for xid, ch := range c.pending {
		close(ch)
		delete(c.pending, xid)
	}
	c.mu.Unlock()
	_ = c.nc.Close()
	close(c.done)
}

// read hands replies to their callers and notifications to OnEvent. A
// server silent for two thirds of the session timeout (it answers our
// pings every third) is taken as gone, as go-zookeeper does.
func (c *Conn) read(br *bufio.Reader) {
	defer c.wg.Done()
	var seq uint64
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(c.timeout * 2 / 3))
		b, frame, err := c.readFrame(br)
		if err != nil {
			c.fail(fmt.Errorf("zkwire: read: %w", err))
			return
		}
		seq++
		h, body, err := ParseReplyHeader(b)
		if err != nil {
			c.fail(err)
			return
		}
		switch h.Xid {
		case XidAuth:
			continue
		case XidPing:
			c.seen(h.Zxid)
			continue
		}
		c.seen(h.Zxid)
		switch h.Xid {
		case XidWatch:
			proptrace.Mark(proptrace.Wire)
			ev, err := ParseWatcherEvent(body)
			if err != nil {
				c.fail(fmt.Errorf("zkwire: notification: %w", err))
				return
			}
			if ev.Type == EventNodeDeleted {
				// The ping's reply tells the zxid the deletion is at, at
				// least, in one round trip instead of the next ping's.
				select {
				case c.pingNow <- struct{}{}:
				default: // one is asked for already: it covers this one too
				}
			}
			if c.onEvent != nil {
				c.onEvent(seq, ev)
			}
			continue
		}
		c.mu.Lock()
		ch, ok := c.pending[h.Xid]
		delete(c.pending, h.Xid)
		c.mu.Unlock()
		if ok {
			ch <- Reply{Header: h, Body: body, Seq: seq, frame: frame, c: c}
		}
	}
}

func (c *Conn) ping() {
	defer c.wg.Done()
	t := time.NewTicker(c.timeout / 3)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-c.pingNow:
		case <-t.C:
		}
		if err := c.write(appendFrame(nil, XidPing, OpPing, nil)); err != nil {
			c.fail(fmt.Errorf("zkwire: ping: %w", err))
			return
		}
	}
}

// Close ends the session (so the server drops its watches now, not at
// the timeout) and waits for the server to confirm it, closes the
// connection and waits for the Conn's goroutines. It is idempotent.
func (c *Conn) Close() {
	c.once.Do(func() {
		if c.Err() == nil {
			c.closing.Store(true)
			// Waits for the server's answer (at most a second), so that
			// the session is gone from the server when Close returns.
			ctx, cancel := context.WithTimeout(context.Background(), min(c.timeout, time.Second))
			_, _ = c.Send(OpClose, nil).Wait(ctx)
			cancel()
		}
		c.fail(ErrClosed)
	})
	c.wg.Wait()
}
