package runstate_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gracekit/gracekit/internal/runstate"
	"github.com/gracekit/gracekit/lifecycle"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestTheTable(t *testing.T) {
	ctx := context.Background()
	var m runstate.Machine
	var starts, stops, idles atomic.Int32
	start := func(context.Context) error { starts.Add(1); return nil }
	stop := func(context.Context) error { stops.Add(1); return nil }
	idle := func() { idles.Add(1) }

	fail := errors.New("port in use")
	if err := m.Start(ctx, func(context.Context) error { return fail }); !errors.Is(err, fail) || m.State() != lifecycle.StateFailed {
		t.Fatalf("failed start: %v, %s", err, m.State())
	}
	if err := m.Start(ctx, start); err != nil || m.State() != lifecycle.StateStarted {
		t.Fatalf("retry: %v, %s", err, m.State())
	}
	if err := m.Start(ctx, start); !errors.Is(err, lifecycle.ErrStarted) || starts.Load() != 1 {
		t.Fatalf("second start: %v, %d starts", err, starts.Load())
	}
	if err := m.Stop(ctx, stop, idle); err != nil || m.State() != lifecycle.StateStopped {
		t.Fatalf("stop: %v, %s", err, m.State())
	}
	if err := m.Stop(ctx, stop, idle); err != nil || stops.Load() != 1 || idles.Load() != 0 {
		t.Fatalf("second stop: %v, %d stops, %d idles", err, stops.Load(), idles.Load())
	}
	if err := m.Start(ctx, start); !errors.Is(err, lifecycle.ErrStopped) || starts.Load() != 1 {
		t.Fatalf("start after stop: %v", err)
	}

	var n runstate.Machine
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := n.Start(cancelled, start); !errors.Is(err, context.Canceled) || n.State() != lifecycle.StateNew {
		t.Fatalf("start with a done ctx: %v, %s", err, n.State())
	}
	if err := n.Stop(ctx, stop, idle); err != nil || idles.Load() != 1 || stops.Load() != 1 {
		t.Fatalf("stop before start: %v, %d idles", err, idles.Load())
	}
}

// A Stop whose ctx ends while a start ignores its cancellation returns in
// time; the start, when it ends, stops what it started itself.
func TestAnAbandonedStopIsDoneByTheStart(t *testing.T) {
	var m runstate.Machine
	release := make(chan struct{})
	started := make(chan struct{})
	var stopped atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- m.Start(context.Background(), func(context.Context) error {
			close(started)
			<-release // ignores its ctx
			return nil
		})
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := m.Stop(ctx, func(context.Context) error { stopped.Store(true); return nil }, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop: %v, want its ctx's error", err)
	}
	close(release)
	if err := <-done; !errors.Is(err, lifecycle.ErrStopped) {
		t.Fatalf("Start: %v, want ErrStopped", err)
	}
	if !stopped.Load() || m.State() != lifecycle.StateStopped {
		t.Fatalf("stopped %v, state %s", stopped.Load(), m.State())
	}
	if err := m.Stop(context.Background(), nil, nil); err != nil {
		t.Fatalf("a later Stop: %v", err)
	}
}
