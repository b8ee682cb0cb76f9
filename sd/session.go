package sd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Session is a Client that connects at Start rather than at construction,
// shared by the roles of one process (provider, consumer, gateway): each
// role Starts it when it starts and Stops it when it stops, and the last
// Stop closes the Client, which ends the ZooKeeper session. This is what
// apps that build everything first and connect when they start (fx's
// OnStart) need: NewSession does no I/O. Its methods are safe for
// concurrent use.
type Session struct {
	connect string
	opts    []ClientOption
	timeout time.Duration // the connect timeout asked for

	mu     sync.Mutex
	client *Client
	users  int
	closed bool
}

// ErrNotStarted is returned by Session.Client before Start.
var ErrNotStarted = errors.New("sd: session not started")

// NewSession checks connect and opts now, as NewClient would, and
// connects at Start.
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
	return &Session{connect: connect, opts: append([]ClientOption(nil), opts...), timeout: o.connectTimeout}, nil
}

// Start connects on its first call, within the connect timeout and ctx,
// and counts one more user; every Start that returned nil needs a Stop.
func (s *Session) Start(ctx context.Context) (*Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.client == nil {
		timeout := s.timeout
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
			timeout = time.Until(dl)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if timeout < 100*time.Millisecond {
			return nil, fmt.Errorf("sd: connect %s: %w", s.connect, context.DeadlineExceeded)
		}
		c, err := NewClient(s.connect, append(s.opts, ConnectTimeout(timeout))...)
		if err != nil {
			return nil, err
		}
		s.client = c
	}
	s.users++
	return s.client, nil
}

// Client is the connected Client, or ErrNotStarted before Start and
// ErrClosed after the last Stop.
func (s *Session) Client() (*Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, ErrClosed
	case s.client == nil:
		return nil, ErrNotStarted
	}
	return s.client, nil
}

// Stop counts one user less; the last one closes the Client (the
// session's ephemeral nodes go), within ctx: when ctx ends first, Stop
// returns its error and the close ends in the background, in bounded time.
func (s *Session) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.users > 0 {
		s.users--
	}
	if s.users > 0 || s.client == nil || s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	c := s.client
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Close()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sd: close the ZooKeeper session: %w", ctx.Err())
	}
}
