package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// The stop suite: how long an idle provider's whole stop sequence takes with
// two acking gateways. go-kit has no stop sequence to compare with; today's
// practice is a fixed sleep of 3 to 15 s. stop_idle_grpc is the same for a
// gRPC provider that a grpc-go client watches (healthCheckConfig: a
// Health/Watch stream held open) and a probe checks every 100 ms
// (Health/Check, as Kubernetes and Envoy do): neither is the application's
// traffic, so its stop should take what stop_idle_2gw takes; its ratio is
// its time over stop_idle_2gw's.
func init() { register("stop", runStop) }

const stopRuns = 5

// stopSecret signs the flushes of the stop suite.
var stopSecret = []byte("bench-stop-flush-secret-0123456789")

func runStop() error {
	dir, err := os.MkdirTemp("", "gracekit-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cluster, err := zktest.Start(dir, serverOptions...)
	if err != nil {
		return err
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var urls []string
	for range 2 {
		gw, err := startStopGateway(ctx, cluster.ConnectString(), "quote")
		if err != nil {
			return err
		}
		defer gw.close()
		urls = append(urls, gw.flushURL)
	}
	var took, tookGRPC []float64
	for i := range stopRuns {
		p, err := startIdleProvider(ctx, cluster.ConnectString(), "quote", fmt.Sprintf("idle-%d", i), urls)
		if err != nil {
			return err
		}
		d, err := stopIdle(ctx, p)
		if err != nil {
			return err
		}
		took = append(took, d)
	}
	for i := range stopRuns {
		d, err := stopIdleGRPC(ctx, cluster.ConnectString(), "quote", fmt.Sprintf("idle-grpc-%d", i), urls)
		if err != nil {
			return err
		}
		tookGRPC = append(tookGRPC, d)
	}
	httpMS, grpcMS := pct(took, 50), pct(tookGRPC, 50)
	report("stop_idle_2gw", httpMS, 0, "ms")
	fmt.Printf("BENCH name=stop_idle_grpc gracekit=%sms stop_idle_2gw=%sms %s\n", num(grpcMS), num(httpMS), spread([]float64{httpMS}, []float64{grpcMS}))
	return nil
}

// stopIdle stops p and returns how long its stop sequence took, in ms; every
// gateway must have acked.
func stopIdle(ctx context.Context, p *provider.Provider) (float64, error) {
	if err := p.Stop(ctx); err != nil {
		return 0, err
	}
	rep := p.Report()
	for _, f := range rep.Flush {
		if !f.Acked {
			return 0, fmt.Errorf("gateway %s did not ack: %v", f.Target, f.Err)
		}
	}
	return ms(rep.Duration), nil
}

// startIdleProvider starts a provider of service on a loopback port, with
// its own session, whose stop flushes flushURLs. It serves no route.
func startIdleProvider(ctx context.Context, connect, service, id string, flushURLs []string) (*provider.Provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	sess, err := sd.NewSession(connect, sd.SessionTimeout(5*time.Second))
	if err == nil {
		var p *provider.Provider
		p, err = provider.New(sess, provider.Config{
			Instance: sd.Instance{Name: service, ID: id, Address: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port},
			Server:   &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 5 * time.Second},
			Listener: ln,
			Flush:    provider.Flush{Secret: stopSecret, Targets: flushURLs},
		}, provider.WithLogger(quietLog))
		if err == nil {
			return p, p.Start(ctx) // a failed Start undoes what it did
		}
	}
	ln.Close()
	return nil, err
}

// stopGateway is a consumer that routes one service and accepts flushes
// for it at flushURL, on a loopback port.
type stopGateway struct {
	flushURL string
	close    func()
}

// startStopGateway starts a gateway of service, with its own session.
func startStopGateway(ctx context.Context, connect, service string) (*stopGateway, error) {
	sess, err := sd.NewSession(connect, sd.SessionTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	c, err := consumer.New(sess)
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	stopConsumer := func() { _ = c.Stop(context.Background()) }
	// The calls are never made: the endpoint only makes the service routed,
	// so that a flush evicts from its Endpointer.
	noCall := func(string) (kitendpoint.Endpoint, io.Closer, error) {
		return func(context.Context, any) (any, error) { return nil, nil }, nil, nil
	}
	if _, err := c.Endpoint(ctx, service, noCall); err != nil {
		stopConsumer()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		stopConsumer()
		return nil, err
	}
	url := "http://" + ln.Addr().String() + "/flush"
	h, err := c.FlushHandler(stopSecret, []string{url})
	if err != nil {
		ln.Close()
		stopConsumer()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/flush", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "bench: stop: gateway flush server: %v\n", err)
		}
	}()
	return &stopGateway{flushURL: url, close: func() {
		_ = srv.Close()
		<-done
		stopConsumer()
	}}, nil
}

// quietLog keeps the providers' lifecycle lines out of the BENCH output.
var quietLog = slog.New(slog.DiscardHandler)
