package sd

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gracekit/gracekit/lifecycle"
)

// Session is a Client made at Start rather than at construction, shared
// by the roles of one process (provider, consumer, gateway), so that the
// process holds one Client's sessions (at most two, see Client). Each
// Start that returns nil takes a share, and each Stop gives one back: the
// first share makes the Client, which dials when a role first needs it
// (a registration, a watched service), and giving back the last one
// closes it, which ends its ZooKeeper sessions and ephemeral nodes.
// Neither NewSession nor Start does I/O. Its methods are safe for
// concurrent use.
//
// Its states are those of every object in gracekit that starts something
// (lifecycle.State), with shares:
//
//	state     Start                                     Stop
//	New       make the Client: Started, one share       ErrNotStarted, changes nothing
//	Starting  waits for it, then as below               ErrNotStarted, changes nothing
//	Started   one more share on the same Client         one share less; the last closes: Stopping
//	Stopping  waits for the close, then as Stopped      waits for the close, within ctx
//	Stopped   makes a new Client                        nil
//	Failed    makes one again (a retry)                 ErrNotStarted, changes nothing
//
// A Start whose ctx is done returns its error and changes nothing. The
// Session may connect again after it closed, because a role whose Start
// failed gives its share back and may retry; the roles themselves refuse
// to start after their Stop (lifecycle.ErrStopped), so nothing a stopped
// app holds reconnects.
type Session struct {
	connect string
	opts    []ClientOption

	mu     sync.Mutex
	state  lifecycle.State
	client *Client       // while Started or Stopping
	users  int           // shares out
	change chan struct{} // closed when the connect or the close in progress ends
}

// ErrNotStarted is returned by Session.Client before Start, and by a
// Session.Stop that no Start matches.
var ErrNotStarted = errors.New("sd: session not started")

// NewSession checks connect and opts now, as NewClient would, and
// makes its Client at Start.
func NewSession(connect string, opts ...ClientOption) (*Session, error) {
	if _, _, err := ParseConnectString(connect); err != nil {
		return nil, err
	}
	o := clientOptions{connectTimeout: DefaultConnectTimeout}
	for _, opt := range opts {
		if err := opt.applyClient(&o); err != nil {
			return nil, err
		}
	}
	return &Session{connect: connect, opts: append([]ClientOption(nil), opts...)}, nil
}

// Start takes a share, making the Client first when none is out; every
// Start that returned nil needs one Stop. Starts during a close wait for
// it, within their ctx.
func (s *Session) Start(ctx context.Context) (*Client, error) {
	for {
		s.mu.Lock()
		switch s.state {
		case lifecycle.StateStarted:
			s.users++
			c := s.client
			s.mu.Unlock()
			return c, nil
		case lifecycle.StateStarting, lifecycle.StateStopping:
			ch := s.change
			s.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("sd: wait for the session: %w", ctx.Err())
			}
		}
		if err := ctx.Err(); err != nil {
			s.mu.Unlock()
			return nil, err
		}
		s.state, s.change = lifecycle.StateStarting, make(chan struct{})
		s.mu.Unlock()

		c, err := NewClient(s.connect, s.opts...)

		s.mu.Lock()
		if err != nil {
			s.state = lifecycle.StateFailed
		} else {
			s.state, s.client, s.users = lifecycle.StateStarted, c, 1
		}
		close(s.change)
		s.mu.Unlock()
		return c, err
	}
}

// State returns the Session's state.
func (s *Session) State() lifecycle.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// Client is the connected Client while a share is out, or ErrNotStarted
// before the first Start and ErrClosed after the last Stop.
func (s *Session) Client() (*Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case lifecycle.StateStarted:
		return s.client, nil
	case lifecycle.StateStopping, lifecycle.StateStopped:
		return nil, ErrClosed
	}
	return nil, ErrNotStarted
}

// Stop gives a share back; the last one closes the Client (the session's
// ephemeral nodes go), within ctx: when ctx ends first, Stop returns its
// error and the close ends in the background, in bounded time, before the
// Session connects again. A Stop after the last one waits for that close,
// within ctx, and returns nil; a Stop that no Start matches returns
// ErrNotStarted and changes nothing.
func (s *Session) Stop(ctx context.Context) error {
	s.mu.Lock()
	switch s.state {
	case lifecycle.StateStarted:
	case lifecycle.StateStopping:
		ch := s.change
		s.mu.Unlock()
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("sd: close the ZooKeeper session: %w", ctx.Err())
		}
	case lifecycle.StateStopped:
		s.mu.Unlock()
		return nil
	default:
		s.mu.Unlock()
		return fmt.Errorf("sd: Stop without a Start that took a share (session %s): %w", s.state, ErrNotStarted)
	}
	if s.users--; s.users > 0 {
		s.mu.Unlock()
		return nil
	}
	c, ch := s.client, make(chan struct{})
	s.state, s.change = lifecycle.StateStopping, ch
	s.mu.Unlock()
	go func() { // owned by the Session: a Start waits for it
		c.Close()
		s.mu.Lock()
		s.state, s.client = lifecycle.StateStopped, nil
		close(ch)
		s.mu.Unlock()
	}()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sd: close the ZooKeeper session: %w", ctx.Err())
	}
}
