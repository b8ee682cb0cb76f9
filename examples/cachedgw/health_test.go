package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

type healthProvider struct {
	*provider.Provider
	served atomic.Int64
	sick   atomic.Bool
}

func startHealthProvider(t *testing.T, zkc *zktest.Cluster, id, flushURL string, opts ...sd.ClientOption) *healthProvider {
	t.Helper()
	hp := &healthProvider{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := sd.NewSession(zkc.ConnectString(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hp.served.Add(1)
		_, _ = io.WriteString(w, `{"instance":"`+id+`"}`)
	})}
	p, err := provider.New(sess, provider.Config{
		Instance: sd.Instance{Name: "quote", ID: id, Address: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port},
		Server:   srv, Listener: ln,
		Flush: provider.Flush{SpringTargets: []string{flushURL}},
		// The check returns at once: a Timeout of one Interval would count
		// a check the loaded machine did not run within 50 ms as failed.
		Health: provider.HealthCheck{Interval: 50 * time.Millisecond, Timeout: testutil.WaitLimit, Failures: 2, Passes: 2, Hold: 200 * time.Millisecond,
			Check: func(context.Context) error {
				if hp.sick.Load() {
					return errors.New("the database is down")
				}
				return nil
			}},
		QuietWindow: 50 * time.Millisecond, MaxQuiesce: 500 * time.Millisecond, DrainTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	hp.Provider = p
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	return hp
}

// Issue 16: a Spring-style cached gateway, flushed through the GET mode,
// sends a provider whose health check fails no request once the flush was
// acknowledged, and sends it traffic again once it recovered (at its next
// read of ZooKeeper).
func TestACachedGatewayDropsASickInstanceAndTakesItBack(t *testing.T) {
	zkc := zktest.New(t)
	conn, _, err := zk.Connect(zkc.Addrs(), 5*time.Second, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	g := &gateway{cache: newCache(&zkLister{conn: conn, path: "/services/quote", service: "quote"}, time.Second, newMetrics(), slog.New(slog.DiscardHandler)),
		service: "quote", m: newMetrics(), client: newClient()}
	defer g.client.CloseIdleConnections()
	fw := &flushWatch{id: "q1"}
	gw := httptest.NewServer(fw.handler(g.mux()))
	defer gw.Close()
	sick := startHealthProvider(t, zkc, "q1", gw.URL+"/flushCache")
	startHealthProvider(t, zkc, "q2", gw.URL+"/flushCache")
	g.client.Transport = fw.transport(g.client.Transport, sick.Addr().String())

	var (
		stop   = make(chan struct{})
		wg     sync.WaitGroup
		failed atomic.Int64
	)
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Get(gw.URL + "/api/quote?symbol=ABC")
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	waitFor(t, "q1 serving", func() bool { return sick.served.Load() > 20 })

	fw.armed.Store(true)
	sick.sick.Store(true)
	waitFor(t, "q1 out of rotation, flushed", func() bool {
		h := sick.Health()
		return len(h) == 1 && !h[0].Healthy && !h[0].Done.IsZero() && fw.flushed.Load()
	})
	if h := sick.Health(); h[0].Err == nil {
		t.Fatalf("transition %+v, want the check's error", h[0])
	}
	// Requests routed before the flush was answered may still be on their
	// way to q1; none routed after it may reach it.
	waitFor(t, "the requests routed before the flush answered", func() bool { return fw.inFlightBefore() == 0 })
	after := sick.served.Load()
	time.Sleep(1500 * time.Millisecond) // past the cache's TTL: a re-read drops it too
	if n := sick.served.Load() - after; n != 0 {
		t.Fatalf("q1 served %d requests after the flush was acknowledged and those routed before it were done", n)
	}
	if n := fw.late.Load(); n != 0 {
		t.Fatalf("the gateway sent q1 %d requests it routed after it answered the flush", n)
	}

	sick.sick.Store(false)
	waitFor(t, "q1 back in rotation", func() bool { return len(sick.Health()) == 2 })
	back := sick.served.Load()
	waitFor(t, "q1 gets traffic again", func() bool { return sick.served.Load() > back+20 })
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d requests failed", n)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
	}
}
