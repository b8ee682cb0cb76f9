package sd_test

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/internal/proptrace"
	"github.com/gracekit/gracekit/sd"
)

// A deregistration seen by a recursive watch goes through every stage the
// bench's -prop-stages table times, in order: the frame off the watch
// session, the Instancer's feed, its publish, its fan-out and the
// Endpointer. Not parallel: the hook is global, and other tests' marks
// could only add to what this one must find.
func TestADeletionIsMarkedAtEveryPropagationStage(t *testing.T) {
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	r := register(t, provider, instance("pay", 9001), at)
	register(t, provider, instance("pay", 9002), at)
	in, err := sd.NewInstancer(consumer, "pay", sd.WithWatchMode(sd.WatchRecursive), at)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Stop)
	e, err := endpoint.NewEndpointer(in, func(string) (kitendpoint.Endpoint, io.Closer, error) {
		return func(context.Context, any) (any, error) { return nil, nil }, nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	endpoints := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(waitLimit); ; time.Sleep(5 * time.Millisecond) {
			if eps, _ := e.Endpoints(); len(eps) == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the Endpointer never listed %d endpoints", n)
			}
		}
	}
	endpoints(2)

	var mu sync.Mutex
	var seen []proptrace.Stage
	proptrace.SetHook(func(s proptrace.Stage) {
		mu.Lock()
		seen = append(seen, s)
		mu.Unlock()
	})
	t.Cleanup(func() { proptrace.SetHook(nil) })
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := r.DeregisterContext(ctx); err != nil {
		t.Fatal(err)
	}
	endpoints(1)
	proptrace.SetHook(nil)

	mu.Lock()
	defer mu.Unlock()
	next := proptrace.Stage(0)
	for _, s := range seen {
		if s == next {
			next++
		}
		if next == proptrace.Stages {
			return
		}
	}
	t.Fatalf("marks %v: no %v after the stages before it", seen, next)
}
