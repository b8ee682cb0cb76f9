package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeLister returns a fixed list and counts reads; block, when set, holds
// a read until it is closed.
type fakeLister struct {
	mu    sync.Mutex
	list  []target
	reads int
	block chan struct{}
}

func (f *fakeLister) List(context.Context) ([]target, error) {
	f.mu.Lock()
	f.reads++
	ts, block := append([]target(nil), f.list...), f.block
	f.mu.Unlock()
	if block != nil {
		<-block
	}
	return ts, nil
}

func newTestCache(src lister, now *time.Time) *cache {
	c := newCache(src, DefaultTTL, newMetrics(), slog.New(slog.DiscardHandler))
	c.now = func() time.Time { return *now }
	return c
}

func TestCacheIsReusedForTheTTLAndReadAgainWhenEmpty(t *testing.T) {
	now := time.Unix(1000, 0)
	src := &fakeLister{list: []target{{"q1", "127.0.0.1:1"}, {"q2", "127.0.0.1:2"}}}
	c := newTestCache(src, &now)
	ctx := context.Background()
	if ts, _ := c.list(ctx); len(ts) != 2 || src.reads != 1 {
		t.Fatalf("first list: %v after %d reads", ts, src.reads)
	}
	src.list = []target{{"q3", "127.0.0.1:3"}}
	now = now.Add(DefaultTTL - time.Second)
	if ts, _ := c.list(ctx); len(ts) != 2 || src.reads != 1 {
		t.Fatalf("within the TTL: %v after %d reads, want the cached list", ts, src.reads)
	}
	if !c.evict("q1") || c.evict("q1") || c.evict("nope") {
		t.Fatal("evict reports a listed id once, and nothing else")
	}
	if !c.evict("q2") {
		t.Fatal("q2 not listed")
	}
	if ts, _ := c.list(ctx); len(ts) != 1 || ts[0].id != "q3" || src.reads != 2 {
		t.Fatalf("an empty list: %v after %d reads, want it read again at once", ts, src.reads)
	}
	now = now.Add(DefaultTTL)
	if _, _ = c.list(ctx); src.reads != 3 {
		t.Fatalf("after the TTL: %d reads, want 3", src.reads)
	}
}

func TestAFlushDuringAReadKeepsTheIdOut(t *testing.T) {
	now := time.Unix(1000, 0)
	src := &fakeLister{list: []target{{"q1", "127.0.0.1:1"}, {"q2", "127.0.0.1:2"}}, block: make(chan struct{})}
	c := newTestCache(src, &now)
	done := make(chan []target)
	go func() {
		ts, _ := c.list(context.Background())
		done <- ts
	}()
	for {
		src.mu.Lock()
		n := src.reads
		src.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	c.evict("q1") // the provider flushed while the read was in progress
	close(src.block)
	if ts := <-done; len(ts) != 1 || ts[0].id != "q2" {
		t.Fatalf("list = %v, want q2 only", ts)
	}
}

func TestGatewayForwardsAndFlushes(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get(headerOrderKey)+"|"+r.Header.Get(headerIdempotencyKey))
		mu.Unlock()
		_, _ = io.WriteString(w, `{"instance":"q1"}`)
	}))
	defer prov.Close()
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()
	now := time.Unix(1000, 0)
	src := &fakeLister{list: []target{{"q0", deadAddr}, {"q1", strings.TrimPrefix(prov.URL, "http://")}}}
	g := &gateway{cache: newTestCache(src, &now), service: "quote", m: newMetrics(), client: newClient()}
	defer g.client.CloseIdleConnections()
	srv := httptest.NewServer(g.mux())
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	// A GET to the dead instance is retried once on the next.
	for range 2 {
		resp, err := srv.Client().Get(srv.URL + "/api/quote?symbol=ABC")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET = %d, want 200 after a retry", resp.StatusCode)
		}
	}
	// A POST to the dead instance is not retried: 502 naming it.
	var codes []int
	var upstreams []string
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/orders", strings.NewReader(`{"symbol":"ABC","qty":1}`))
		req.Header.Set(headerIdempotencyKey, "k1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		upstreams = append(upstreams, body["upstream"])
	}
	if !(codes[0] == 502 && codes[1] == 200 || codes[0] == 200 && codes[1] == 502) || !strings.Contains(strings.Join(upstreams, ","), deadAddr) {
		t.Fatalf("POSTs = %v %v, want one 200 and one 502 naming %s", codes, upstreams, deadAddr)
	}
	mu.Lock()
	if keys[len(keys)-1] != "k1|" {
		t.Errorf("the provider got keys %q, want Order-Key k1 and no Idempotency-Key", keys)
	}
	mu.Unlock()

	// The Spring-style flush removes the id.
	resp, err := srv.Client().Get(srv.URL + "/flushCache?applicationName=quote&host=127.0.0.1&id=q0")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if resp.StatusCode != 200 || got["result"] != "evicted" {
		t.Fatalf("flush = %d %v", resp.StatusCode, got)
	}
	if ts, _ := g.cache.list(context.Background()); len(ts) != 1 || ts[0].id != "q1" {
		t.Fatalf("after the flush: %v", ts)
	}
	resp, err = srv.Client().Get(srv.URL + "/flushCache?applicationName=quote")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("flush without an id = %d, want 400", resp.StatusCode)
	}
}
