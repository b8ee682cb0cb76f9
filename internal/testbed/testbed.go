// Package testbed wires real providers and gateways from gracekit's parts,
// on loopback, for this repository's integration tests and benchmarks.
package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	"github.com/go-kit/kit/metrics"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/shutdown/flush"
)

// Secret is the flush secret every testbed part shares.
var Secret = []byte("testbed-flush-secret-0123456789")

// Provider is a registered HTTP service whose stop runs the whole
// shutdown.Sequence.
type Provider struct {
	Seq     *shutdown.Sequence
	Tracker *shutdown.Tracker
	Served  atomic.Int64 // responses written
	Addr    string
}

// ProviderConfig describes a Provider.
type ProviderConfig struct {
	Connect  string        // ZooKeeper connect string
	Service  string        // service name
	ID       string        // instance id
	Latency  time.Duration // time each request takes
	FlushURL []string      // gateways' flush URLs
	// Stop bounds; zero keeps shutdown's defaults.
	QuietWindow, MaxQuiesce time.Duration
}

// StartProvider listens on a free loopback port, registers and serves.
func StartProvider(ctx context.Context, cfg ProviderConfig) (*Provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	client, err := sd.NewClient(cfg.Connect, sd.SessionTimeout(5*time.Second))
	if err != nil {
		ln.Close()
		return nil, err
	}
	reg, err := sd.NewRegistrar(client, sd.Instance{Name: cfg.Service, ID: cfg.ID, Address: "127.0.0.1", Port: port})
	if err != nil {
		ln.Close()
		client.Close()
		return nil, err
	}
	p := &Provider{Tracker: &shutdown.Tracker{}, Addr: ln.Addr().String()}
	var notifier *flush.Notifier
	if len(cfg.FlushURL) > 0 {
		notifier, err = flush.NewNotifier(
			flush.Self{Service: cfg.Service, ID: cfg.ID, Address: "127.0.0.1", Port: port},
			Secret, flush.StaticTargets(cfg.FlushURL...), flush.Registration(reg.Czxid))
		if err != nil {
			ln.Close()
			client.Close()
			return nil, err
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		if cfg.Latency > 0 {
			t := time.NewTimer(cfg.Latency)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"instance": cfg.ID})
		p.Served.Add(1)
	})
	seq, err := shutdown.NewSequence(shutdown.Config{
		Registration: reg, Tracker: p.Tracker, Notifier: notifier,
		Server:   &http.Server{Handler: p.Tracker.Middleware(mux), ReadHeaderTimeout: 5 * time.Second},
		Listener: ln,
		CloseSession: func(context.Context) error {
			client.Close()
			return nil
		},
		QuietWindow: cfg.QuietWindow, MaxQuiesce: cfg.MaxQuiesce,
	})
	if err != nil {
		ln.Close()
		client.Close()
		return nil, err
	}
	p.Seq = seq
	if err := seq.Start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// Gateway discovers a service, balances and retries calls to it, and
// evicts instances when their flush request arrives.
type Gateway struct {
	Call       kitendpoint.Endpoint // GET /work on some instance; returns the instance id
	Instancer  *sd.Instancer
	Endpointer *endpoint.Endpointer
	FlushURL   string
	Flushes    atomic.Int64 // flush requests for the service that were acknowledged
	// Results counts the acknowledged flush requests by flush.Result.
	Results struct{ Evicted, NotListed, OtherRegistration, NotRouted atomic.Int64 }

	client  *sd.Client
	factory *endpoint.HTTPFactory
	srv     *http.Server
	done    chan struct{}
}

// StartGateway watches service and serves its flush handler on a free
// loopback port.
func StartGateway(connect, service string) (g *Gateway, err error) {
	g = &Gateway{done: make(chan struct{})}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	if g.client, err = sd.NewClient(connect, sd.SessionTimeout(5*time.Second)); err != nil {
		return nil, err
	}
	if g.Instancer, err = sd.NewInstancer(g.client, service); err != nil {
		return nil, err
	}
	g.factory, err = endpoint.NewHTTPFactory(http.MethodGet, "/work",
		func(context.Context, *http.Request, any) error { return nil },
		func(_ context.Context, r *http.Response) (any, error) {
			if r.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("testbed: status %d", r.StatusCode)
			}
			var body map[string]string
			err := json.NewDecoder(r.Body).Decode(&body)
			return body["instance"], err
		})
	if err != nil {
		return nil, err
	}
	if g.Endpointer, err = endpoint.NewEndpointer(g.Instancer, g.factory.Factory); err != nil {
		return nil, err
	}
	rr, err := endpoint.NewRoundRobin(g.Endpointer)
	if err != nil {
		return nil, err
	}
	if g.Call, err = endpoint.NewRetry(rr, endpoint.Attempts(3)); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g.FlushURL = "http://" + ln.Addr().String() + "/flush"
	evict := flush.DiscoveryEvicter(g.Instancer, g.Endpointer)
	h, err := flush.NewHandler(Secret, []string{g.FlushURL}, func(s string) (flush.Evicter, bool) {
		if s != service {
			return nil, false
		}
		return flush.EvicterFunc(func(ctx context.Context, req flush.Request) (flush.Result, error) {
			res, err := evict.Evict(ctx, req)
			if err == nil {
				g.Flushes.Add(1)
			}
			return res, err
		}), true
	}, flush.ResultCounter(resultCounter(func(r string) {
		switch flush.Result(r) {
		case flush.Evicted:
			g.Results.Evicted.Add(1)
		case flush.NotListed:
			g.Results.NotListed.Add(1)
		case flush.OtherRegistration:
			g.Results.OtherRegistration.Add(1)
		case flush.NotRouted:
			g.Results.NotRouted.Add(1)
		}
	})))
	if err != nil {
		ln.Close()
		return nil, err
	}
	g.srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(g.done)
		if err := g.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			panic("testbed: gateway serve: " + err.Error())
		}
	}()
	return g, nil
}

// resultCounter is a go-kit metrics.Counter that calls add with the value
// of its "result" label.
type resultCounter func(result string)

func (c resultCounter) With(labelValues ...string) metrics.Counter {
	for i := 0; i+1 < len(labelValues); i += 2 {
		if labelValues[i] == "result" {
			r := labelValues[i+1]
			return resultCounter(func(string) { c(r) })
		}
	}
	return c
}

func (c resultCounter) Add(float64) { c("") }

// WaitInstances waits until the endpointer balances over n instances.
func (g *Gateway) WaitInstances(ctx context.Context, n int) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		if got := len(g.Endpointer.Instances()); got == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testbed: %d instances, want %d: %w", len(g.Endpointer.Instances()), n, ctx.Err())
		case <-t.C:
		}
	}
}

// Close stops everything the gateway started and waits for it.
func (g *Gateway) Close() {
	if g.srv != nil {
		_ = g.srv.Close()
		<-g.done
	}
	if g.Endpointer != nil {
		_ = g.Endpointer.Close()
	}
	if g.factory != nil {
		_ = g.factory.Close()
	}
	if g.Instancer != nil {
		g.Instancer.Stop()
	}
	if g.client != nil {
		g.client.Close()
	}
}
