package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/health" // client health checking (healthCheckConfig)
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/shutdown/grpcstop"
)

// watchingConfig is grpc-go's client health checking, as grpcresolver
// documents it: the subchannel holds a Health/Watch stream.
const watchingConfig = `{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":""}}`

// stopIdleGRPC starts an idle gRPC provider of service (no method of its
// own, only the health service the provider registers), a client that
// watches its health, and a probe that checks it every 100 ms, then stops
// it and returns how long the stop sequence took, in ms.
func stopIdleGRPC(ctx context.Context, connect, service, id string, flushURLs []string) (float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	sess, err := sd.NewSession(connect, sd.SessionTimeout(5*time.Second))
	if err != nil {
		ln.Close()
		return 0, err
	}
	tracker := new(shutdown.Tracker)
	p, err := provider.New(sess, provider.Config{
		Instance:     sd.Instance{Name: service, ID: id, Address: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port},
		GRPC:         grpc.NewServer(grpcstop.ServerOptions(tracker)...),
		GRPCListener: ln,
		Tracker:      tracker,
		Flush:        provider.Flush{Secret: stopSecret, Targets: flushURLs},
	}, provider.WithLogger(quietLog))
	if err != nil {
		ln.Close()
		return 0, err
	}
	if err := p.Start(ctx); err != nil { // a failed Start undoes what it did
		return 0, err
	}
	addr := "passthrough:///" + ln.Addr().String()
	stopClients, err := healthClients(ctx, addr)
	if err != nil {
		_ = p.Stop(ctx)
		return 0, err
	}
	d, err := stopIdle(ctx, p)
	if cerr := stopClients(); err == nil {
		err = cerr
	}
	return d, err
}

// healthClients starts, against addr, a client that watches its health
// (ready once the watch said SERVING) and a probe that calls Health/Check
// every 100 ms; stop ends both and returns the probe's first error other
// than one the provider's stop explains.
func healthClients(ctx context.Context, addr string) (stop func() error, err error) {
	watcher, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(watchingConfig))
	if err != nil {
		return nil, err
	}
	prober, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		watcher.Close()
		return nil, err
	}
	closeAll := func() { watcher.Close(); prober.Close() }
	readyCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	watcher.Connect()
	for s := watcher.GetState(); s != connectivity.Ready; s = watcher.GetState() {
		if !watcher.WaitForStateChange(readyCtx, s) {
			closeAll()
			return nil, fmt.Errorf("health-watching client not ready (%v): %w", s, readyCtx.Err())
		}
	}
	hc := healthpb.NewHealthClient(prober)
	if _, err := hc.Check(readyCtx, &healthpb.HealthCheckRequest{}); err != nil {
		closeAll()
		return nil, fmt.Errorf("first Health/Check: %w", err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			_, _ = hc.Check(cctx, &healthpb.HealthCheckRequest{}) // NOT_SERVING, then refused, once the stop began
			cancel()
		}
	}()
	return func() error {
		close(done)
		wg.Wait()
		closeAll()
		if watcher.GetState() == connectivity.Ready {
			return errors.New("health-watching client still ready after the stop")
		}
		return nil
	}, nil
}
