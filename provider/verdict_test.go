package provider

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracekit/gracekit/sd"
)

// The verdict's sources race in memory here: health and drain reach the
// readiness on goroutines of their own, and what a ZooKeeper round trip
// would add is only a delay before each.

// unstarted is a Provider built and never started: New does no I/O, so
// its session never connects. Its readiness is ready, as after a Start.
func unstarted(t *testing.T) *Provider {
	t.Helper()
	sess, err := sd.NewSession("127.0.0.1:2181")
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(sess, Config{
		Instance: sd.Instance{Name: "quote", ID: "q1", Address: "127.0.0.1", Port: 8080},
		Server:   &http.Server{ReadHeaderTimeout: time.Second},
	}, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	p.ready.SetReady()
	return p
}

// Issue 40: a health check that recovers as an operator's drain lands
// must leave the drained instance unready: /readyz (Ready) and every
// Notify follower (the gRPC health service, the go-kit twin) end on not
// ready, whichever source applied its reading last.
func TestAHealthRecoveryRacingADrainLeavesTheInstanceUnready(t *testing.T) {
	const rounds = 20000
	p := unstarted(t)
	var last atomic.Bool // what the followers were told last
	defer p.ready.Notify(func(ready bool) { last.Store(ready) })()
	ctx := context.Background()
	for i := range rounds {
		// Out by health and not drained; then the check passes as the
		// Registrar reports an operator's drain.
		p.onRegistrarEvent(sd.RegistrarEvent{Kind: sd.EventUndrained})
		p.applyDrain(ctx)
		p.setSick(true, nil)
		p.onRegistrarEvent(sd.RegistrarEvent{Kind: sd.EventDrained, DrainedBy: ByOperator})
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { <-start; p.setSick(false, nil) })
		wg.Go(func() { <-start; p.applyDrain(ctx) })
		close(start)
		wg.Wait()
		if p.ready.Ready() || last.Load() {
			t.Fatalf("round %d: a drained instance is ready (/readyz ready %v, followers told ready %v) after its health check recovered as the drain landed",
				i, p.ready.Ready(), last.Load())
		}
	}
}
