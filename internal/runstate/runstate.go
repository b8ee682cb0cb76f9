// Package runstate is the one state machine of the objects in gracekit
// that start something and stop it: provider.Provider and
// consumer.Consumer run on a Machine, and sd.Session follows the same
// states with shares (see its documentation).
//
//	state     Start                          Stop
//	New       -> Starting                    -> Stopped (nothing to undo; idle runs)
//	Starting  waits for it, then as below    cancels the start, waits, then as below
//	Started   ErrStarted, changes nothing    -> Stopping -> Stopped
//	Stopping  ErrStopped, changes nothing    waits for the first Stop, same result
//	Stopped   ErrStopped, changes nothing    the first Stop's result
//	Failed    -> Starting (a retry)          -> Stopped (nothing to undo; idle runs)
//
// A Start whose ctx is already done returns ctx's error and changes
// nothing. A failed Start has undone what it did before it returns, so a
// Failed object holds nothing; its Start may be retried.
package runstate

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gracekit/gracekit/lifecycle"
)

// State is lifecycle.State; the short names keep the table readable.
type State = lifecycle.State

const (
	New      = lifecycle.StateNew
	Starting = lifecycle.StateStarting
	Started  = lifecycle.StateStarted
	Stopping = lifecycle.StateStopping
	Stopped  = lifecycle.StateStopped
	Failed   = lifecycle.StateFailed
)

// The errors of a Start that changes nothing: lifecycle's, so that
// errors.Is matches them whichever object returned them.
var (
	ErrStarted = lifecycle.ErrStarted
	ErrStopped = lifecycle.ErrStopped
)

// Machine runs an object's Start and Stop by the table in the package
// documentation. The zero value is New. Its methods are safe for
// concurrent use.
type Machine struct {
	mu          sync.Mutex
	state       State
	cancelStart context.CancelFunc // cancels the Start in progress
	startDone   chan struct{}      // closed when the Start in progress ends
	abandoned   bool               // a Stop gave up waiting for the Start in progress
	stopDone    chan struct{}      // closed when the Stop ends
	stopErr     error
	stop        func(context.Context) error // what an abandoned Stop asked for
}

// State returns the current state.
func (m *Machine) State() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state
}

// Start runs start, unless the state says otherwise (see the table). start
// gets a ctx that Stop cancels, and must undo what it did before it
// returns an error. When a Stop gave up waiting for this Start, Start
// runs that Stop's stop itself once start succeeded, and returns an error
// that wraps ErrStopped.
func (m *Machine) Start(ctx context.Context, start func(context.Context) error) error {
	for {
		m.mu.Lock()
		switch m.state {
		case Started:
			m.mu.Unlock()
			return ErrStarted
		case Stopping, Stopped:
			m.mu.Unlock()
			return ErrStopped
		case Starting:
			done := m.startDone
			m.mu.Unlock()
			select {
			case <-done:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := ctx.Err(); err != nil {
			m.mu.Unlock()
			return err
		}
		sctx, cancel := context.WithCancel(ctx)
		m.state, m.cancelStart, m.startDone = Starting, cancel, make(chan struct{})
		m.mu.Unlock()

		err := start(sctx)
		cancel()

		m.mu.Lock()
		abandoned := m.abandoned
		switch {
		case abandoned:
			m.state = Stopping
		case err != nil:
			m.state = Failed
		default:
			m.state = Started
		}
		close(m.startDone)
		m.mu.Unlock()
		if abandoned {
			if err == nil {
				// The Stop that was asked for could not wait: do it here,
				// on a ctx that keeps ctx's values only, as a stop would.
				err = m.stop(context.WithoutCancel(ctx))
				m.finishStop(err)
			} else {
				m.finishStop(nil) // the failed start undid itself
			}
			return errors.Join(ErrStopped, err)
		}
		return err
	}
}

// Stop runs stop if started (see the table), or idle if nothing was held
// (New or Failed); idle may be nil. A Stop during Start cancels the start
// and waits for it, within ctx; when ctx ends first, Stop returns ctx's
// error and the Start, when it ends, stops what it started itself. Later
// Stops wait for the first, within their ctx, and return its result.
func (m *Machine) Stop(ctx context.Context, stop func(context.Context) error, idle func()) error {
	m.mu.Lock()
	for m.state == Starting {
		m.cancelStart()
		done := m.startDone
		m.mu.Unlock()
		select {
		case <-done:
			m.mu.Lock()
		case <-ctx.Done():
			m.mu.Lock()
			if m.state == Starting {
				if !m.abandoned {
					m.abandoned, m.stop = true, stop
					m.stopDone = make(chan struct{})
				}
				m.mu.Unlock()
				return fmt.Errorf("the start in progress did not end in time; it stops what it started when it ends: %w", ctx.Err())
			}
		}
	}
	switch m.state {
	case New, Failed:
		m.state = Stopped
		m.stopDone = make(chan struct{})
		close(m.stopDone)
		m.mu.Unlock()
		if idle != nil {
			idle()
		}
		return nil
	case Stopping, Stopped:
		m.mu.Unlock()
		return m.wait(ctx)
	}
	m.state = Stopping
	m.stopDone = make(chan struct{})
	m.mu.Unlock()
	err := stop(ctx)
	m.finishStop(err)
	return err
}

func (m *Machine) finishStop(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state, m.stopErr = Stopped, err
	close(m.stopDone)
}

// wait waits for the Stop in progress, within ctx.
func (m *Machine) wait(ctx context.Context) error {
	m.mu.Lock()
	done := m.stopDone
	m.mu.Unlock()
	select {
	case <-done:
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.stopErr
	case <-ctx.Done():
		return fmt.Errorf("stop: wait for the stop in progress: %w", ctx.Err())
	}
}
