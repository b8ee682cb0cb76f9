package shutdown_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracekit/gracekit/shutdown/flush"
	"github.com/gracekit/gracekit/zktest"
)

// A provider stopped while a gateway (a consumer with a flush receiver)
// sends it steady load: no call fails, and every call in flight completes.
func TestProviderStopUnderLoadFailsNoRequest(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gw := startGateway(t, zkc, "quote")
	victim := startProvider(t, zkc, "quote", "quote-1", 20*time.Millisecond, []string{gw.flushURL})
	survivor := startProvider(t, zkc, "quote", "quote-2", 20*time.Millisecond, []string{gw.flushURL})
	gw.waitInstances(t, 2)

	// Steady load: bounded workers, each calling until told to stop.
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := gw.call(callCtx, nil)
				cancel()
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	waitCalls := func(n int64) {
		for deadline := time.Now().Add(30 * time.Second); ok.Load() < n; {
			if time.Now().After(deadline) {
				t.Fatalf("only %d calls succeeded", ok.Load())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitCalls(50)
	stopCtx, stopCancel := context.WithTimeout(ctx, 15*time.Second)
	err := victim.Stop(stopCtx)
	stopCancel()
	if err != nil {
		t.Fatalf("stop: %v", err)
	}
	before := ok.Load()
	waitCalls(before + 50) // the survivor carries the load
	close(stop)
	wg.Wait()

	rep := victim.Report()
	t.Logf("calls ok=%d failed=%d; stop took %v; flush acked=%v; after deregistration=%d; in flight at drain=%d",
		ok.Load(), failed.Load(), rep.Duration, len(rep.Flush) == 1 && rep.Flush[0].Acked, rep.AfterDeregistration, rep.InFlightAtDrain)
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d calls failed; first: %v", n, firstErr.Load())
	}
	if len(rep.Flush) != 1 || !rep.Flush[0].Acked {
		t.Fatalf("flush not acked: %+v", rep.Flush)
	}
	if gw.flushes.Load() != 1 {
		t.Fatalf("gateway evicted %d times, want 1", gw.flushes.Load())
	}
	if n := victim.Tracker().InFlight(); n != 0 {
		t.Fatalf("%d requests still in flight after the stop", n)
	}
	if got := gw.endpointer.Instances(); len(got) != 1 || got[0] != survivor.Addr().String() {
		t.Fatalf("gateway still balances over %v", got)
	}
}

// The stop of an idle provider with two acking gateways, against a real
// ZooKeeper; the duration is logged, not asserted (machines here are noisy).
func TestIdleStopWithTwoGateways(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var urls []string
	var gws []*gateway
	for range 2 {
		gw := startGateway(t, zkc, "quote")
		gws = append(gws, gw)
		urls = append(urls, gw.flushURL)
	}
	p := startProvider(t, zkc, "quote", "idle", 0, urls)
	for _, gw := range gws {
		gw.waitInstances(t, 1)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	rep := p.Report()
	t.Logf("idle stop with 2 gateways: %v", rep.Duration)
	for _, s := range rep.Steps {
		t.Logf("  %-13s %v %v", s.Step, s.Duration, s.Err)
	}
	for _, f := range rep.Flush {
		if !f.Acked {
			t.Fatalf("target %s did not ack: %v", f.Target, f.Err)
		}
	}
	for _, gw := range gws {
		gw.waitInstances(t, 0)
	}
	if err := p.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("a second Stop: %v", err)
	}
}

// Issue 8, case 14: a provider whose gateway does not route its service
// stops without error, and its quiesce ends on its condition (every target
// acked) rather than at its maximum.
func TestAProviderStopsCleanlyWhenItsGatewayDoesNotRouteItsService(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gw := startGateway(t, zkc, "quote")
	p := startProvider(t, zkc, "billing", "billing-1", 0, []string{gw.flushURL})
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	rep := p.Report()
	if len(rep.Flush) != 1 || !rep.Flush[0].Acked || rep.Flush[0].Result != flush.NotRouted {
		t.Fatalf("flush reports %+v, want one acked as not routed", rep.Flush)
	}
	if !rep.Quiesced {
		t.Error("the quiesce did not end on its condition")
	}
	if gw.notRouted.Load() != 1 || gw.flushes.Load() != 0 {
		t.Errorf("gateway: %d not routed, %d flushes; want 1 and 0", gw.notRouted.Load(), gw.flushes.Load())
	}
}
