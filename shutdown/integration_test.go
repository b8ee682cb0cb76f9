package shutdown_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracekit/gracekit/internal/testbed"
	"github.com/gracekit/gracekit/shutdown/flush"
	"github.com/gracekit/gracekit/zktest"
)

// A provider stopped while a gateway sends it steady load through the
// endpoint package: no call fails, and every call in flight completes.
func TestProviderStopUnderLoadFailsNoRequest(t *testing.T) {
	zkc := zktest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gw, err := testbed.StartGateway(zkc.ConnectString(), "quote")
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	var providers []*testbed.Provider
	for _, id := range []string{"quote-1", "quote-2"} {
		p, err := testbed.StartProvider(ctx, testbed.ProviderConfig{
			Connect: zkc.ConnectString(), Service: "quote", ID: id, Latency: 20 * time.Millisecond,
			FlushURL: []string{gw.FlushURL},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Seq.Stop(context.Background())
		providers = append(providers, p)
	}
	if err := gw.WaitInstances(ctx, 2); err != nil {
		t.Fatal(err)
	}

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
				_, err := gw.Call(callCtx, nil)
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
	victim := providers[0]
	stopCtx, stopCancel := context.WithTimeout(ctx, 15*time.Second)
	err = victim.Seq.Stop(stopCtx)
	stopCancel()
	if err != nil {
		t.Fatalf("stop: %v", err)
	}
	before := ok.Load()
	waitCalls(before + 50) // the survivor carries the load
	close(stop)
	wg.Wait()

	rep := victim.Seq.Report()
	t.Logf("calls ok=%d failed=%d; stop took %v; flush acked=%v; after deregistration=%d; in flight at drain=%d",
		ok.Load(), failed.Load(), rep.Duration, len(rep.Flush) == 1 && rep.Flush[0].Acked, rep.AfterDeregistration, rep.InFlightAtDrain)
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d calls failed; first: %v", n, firstErr.Load())
	}
	if len(rep.Flush) != 1 || !rep.Flush[0].Acked {
		t.Fatalf("flush not acked: %+v", rep.Flush)
	}
	if gw.Flushes.Load() != 1 {
		t.Fatalf("gateway evicted %d times, want 1", gw.Flushes.Load())
	}
	if n := victim.Tracker.InFlight(); n != 0 {
		t.Fatalf("%d requests still in flight after the stop", n)
	}
	if got := gw.Endpointer.Instances(); len(got) != 1 || got[0] != providers[1].Addr {
		t.Fatalf("gateway still balances over %v", got)
	}
}

// The stop of an idle provider with two acking gateways, against a real
// ZooKeeper; the duration is logged, not asserted (machines here are noisy).
func TestIdleStopWithTwoGateways(t *testing.T) {
	zkc := zktest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var urls []string
	var gws []*testbed.Gateway
	for range 2 {
		gw, err := testbed.StartGateway(zkc.ConnectString(), "quote")
		if err != nil {
			t.Fatal(err)
		}
		defer gw.Close()
		gws = append(gws, gw)
		urls = append(urls, gw.FlushURL)
	}
	p, err := testbed.StartProvider(ctx, testbed.ProviderConfig{Connect: zkc.ConnectString(), Service: "quote", ID: "idle", FlushURL: urls})
	if err != nil {
		t.Fatal(err)
	}
	for _, gw := range gws {
		if err := gw.WaitInstances(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Seq.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	rep := p.Seq.Report()
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
		if err := gw.WaitInstances(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Seq.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("a second Stop: %v", err)
	}
}

// Issue 8, case 14: a provider whose gateway does not route its service
// stops without error, and its quiesce ends on its condition (every target
// acked) rather than at its maximum.
func TestAProviderStopsCleanlyWhenItsGatewayDoesNotRouteItsService(t *testing.T) {
	zkc := zktest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gw, err := testbed.StartGateway(zkc.ConnectString(), "quote")
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	p, err := testbed.StartProvider(ctx, testbed.ProviderConfig{
		Connect: zkc.ConnectString(), Service: "billing", ID: "billing-1", FlushURL: []string{gw.FlushURL},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Seq.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	rep := p.Seq.Report()
	if len(rep.Flush) != 1 || !rep.Flush[0].Acked || rep.Flush[0].Result != flush.NotRouted {
		t.Fatalf("flush reports %+v, want one acked as not routed", rep.Flush)
	}
	if !rep.Quiesced {
		t.Error("the quiesce did not end on its condition")
	}
	if gw.Results.NotRouted.Load() != 1 || gw.Flushes.Load() != 0 {
		t.Errorf("gateway: %d not routed, %d flushes; want 1 and 0", gw.Results.NotRouted.Load(), gw.Flushes.Load())
	}
}
