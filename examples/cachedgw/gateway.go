package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gracekit/gracekit/shutdown/flush"
)

// Headers of an order's idempotency key, as in examples/gateway.
const (
	headerIdempotencyKey = "Idempotency-Key"
	headerOrderKey       = "Order-Key"
)

// attemptTimeout bounds one call to a provider.
const attemptTimeout = 2 * time.Second

type gateway struct {
	cache   *cache
	service string
	m       *metrics
	client  *http.Client
}

func newClient() *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
	}
	return &http.Client{Transport: tr, Timeout: attemptTimeout}
}

func (g *gateway) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/quote", func(w http.ResponseWriter, r *http.Request) {
		sym := r.URL.Query().Get("symbol")
		if sym == "" {
			writeError(w, http.StatusBadRequest, errors.New("bad request"), "")
			return
		}
		g.forward(w, r, "quote", http.MethodGet, "/quote?"+url.Values{"symbol": {sym}}.Encode(), nil, "")
	})
	mux.HandleFunc("POST /api/orders", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 4<<10))
		if err != nil || !json.Valid(body) {
			writeError(w, http.StatusBadRequest, errors.New("bad request"), "")
			return
		}
		g.forward(w, r, "orders", http.MethodPost, "/orders", body, r.Header.Get(headerIdempotencyKey))
	})
	mux.HandleFunc("GET /flushCache", g.flush)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !g.cache.ready() {
			http.Error(w, "no instance list read yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.m.reg, promhttp.HandlerOpts{}))
	return mux
}

// forward calls one instance of the cached list; a GET that fails with a
// transport error is retried once on the next instance.
func (g *gateway) forward(w http.ResponseWriter, r *http.Request, route, method, pathQuery string, body []byte, key string) {
	g.m.requests.WithLabelValues(route).Inc()
	fail := func(code int, err error, upstream string) {
		g.m.failures.WithLabelValues(route).Inc()
		writeError(w, code, err, upstream)
	}
	ts, err := g.cache.list(r.Context())
	if err != nil {
		fail(http.StatusBadGateway, fmt.Errorf("read instance list: %w", err), "")
		return
	}
	if len(ts) == 0 {
		fail(http.StatusBadGateway, errors.New("no instances of "+g.service), "")
		return
	}
	attempts := 1
	if method == http.MethodGet && len(ts) > 1 {
		attempts = 2
	}
	i := g.cache.pick(ts)
	for n := 1; ; n++ {
		t := ts[i]
		status, respBody, err := g.call(r.Context(), t, method, pathQuery, body, key)
		if err == nil && status/100 == 2 {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(respBody)
			return
		}
		if err == nil {
			fail(http.StatusBadGateway, fmt.Errorf("upstream %s answered %d: %s", t.addr, status, bytes.TrimSpace(respBody)), t.addr)
			return
		}
		if n >= attempts || r.Context().Err() != nil {
			fail(http.StatusBadGateway, fmt.Errorf("call %s: %w", t.addr, err), t.addr)
			return
		}
		g.m.retries.WithLabelValues(route).Inc()
		i = (i + 1) % len(ts) // the next instance of the list, not the same one
	}
}

// call sends one request to t. Its body has no GetBody: net/http never
// replays it by itself.
func (g *gateway) call(ctx context.Context, t target, method, pathQuery string, body []byte, key string) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = io.NopCloser(bytes.NewReader(body)) // hides the type, so no GetBody
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+t.addr+pathQuery, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.ContentLength = int64(len(body))
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set(headerOrderKey, key)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	drain(resp.Body)
	return resp.StatusCode, b, err
}

// flush is Spring's GET /flushCache?applicationName=&host=&id=: it removes
// the id from the cached list, for the upstream service only.
func (g *gateway) flush(w http.ResponseWriter, r *http.Request) {
	req, err := flush.ParseSpringQuery(r.URL.Query())
	if err != nil {
		g.m.flushes.WithLabelValues("refused").Inc()
		writeError(w, http.StatusBadRequest, err, "")
		return
	}
	result := "not-routed"
	if req.Service == g.service {
		result = "not-listed"
		if g.cache.evict(req.ID) {
			result = "evicted"
		}
	}
	g.m.flushes.WithLabelValues(result).Inc()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"result": result, "id": req.ID})
}

func writeError(w http.ResponseWriter, code int, err error, upstream string) {
	body := map[string]string{"error": err.Error()}
	if upstream != "" {
		body["upstream"] = upstream
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// metrics are the cached gateway's Prometheus metrics.
type metrics struct {
	reg                         *prometheus.Registry
	requests, failures, retries *prometheus.CounterVec
	reads, flushes              *prometheus.CounterVec
	instances                   prometheus.Gauge
}

func newMetrics() *metrics {
	cv := func(name, help, label string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
	}
	m := &metrics{
		reg:       prometheus.NewRegistry(),
		requests:  cv("cachedgw_requests_total", "Requests forwarded to the upstream service.", "route"),
		failures:  cv("cachedgw_failures_total", "Forwarded requests that failed (answered 502).", "route"),
		retries:   cv("cachedgw_retries_total", "GETs retried on the next instance.", "route"),
		reads:     cv("cachedgw_cache_reads_total", "Reads of the instance list from ZooKeeper, by reason (first, ttl, empty).", "reason"),
		flushes:   cv("cachedgw_flushes_total", "GET /flushCache requests, by result (evicted, not-listed, not-routed, refused).", "result"),
		instances: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cachedgw_instances", Help: "Instances in the cached list."}),
	}
	m.reg.MustRegister(m.requests, m.failures, m.retries, m.reads, m.flushes, m.instances,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, r := range []string{"quote", "orders"} {
		m.requests.WithLabelValues(r)
		m.failures.WithLabelValues(r)
		m.retries.WithLabelValues(r)
	}
	return m
}
