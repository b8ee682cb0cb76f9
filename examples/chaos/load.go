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
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// sample is one request of the load.
type sample struct {
	n        int64
	at       time.Time // sent
	done     time.Time // answered or failed
	post     bool
	key      string // the POST's Idempotency-Key
	gateway  int
	failed   bool
	reason   string // why it failed: "HTTP 502: ..." or the transport error
	instance string // the provider its answer names
}

// isPost tells whether the n-th request (from 1) is a POST /api/orders: one
// in five, so 20% of the load is non-idempotent.
func isPost(n int64) bool { return n%5 == 0 }

// idempotencyKey is the key of the n-th request of run.
func idempotencyKey(run string, n int64) string { return fmt.Sprintf("%s-%d", run, n) }

var symbols = []string{"ABC", "GKIT", "ZOO", "FX", "QTE"}

// load sends rate requests per second through the gateways, in turn, from
// a pool of workers, until stopped. It does not catch up: a request due
// while every worker is busy is skipped (and counted), so the rate stays
// steady rather than bursting after a stall.
type load struct {
	gateways  []string // base URLs
	run       string   // prefix of the idempotency keys
	rate      int
	workers   int
	client    *http.Client
	transport *http.Transport

	tokens  chan int64
	issued  atomic.Int64
	skipped atomic.Int64
	stopCh  chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
	started time.Time
	ended   time.Time

	mu      sync.Mutex
	samples []sample
	lastOK  []map[string]time.Time // per gateway: instance -> send time of its latest answer
}

func newLoad(gateways []string, run string, rate, workers int, timeout time.Duration) *load {
	tr := &http.Transport{
		Proxy:               nil, // loopback only
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConns:        2 * workers,
		MaxIdleConnsPerHost: workers,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	l := &load{
		gateways: gateways, run: run, rate: rate, workers: workers,
		transport: tr, client: &http.Client{Transport: tr, Timeout: timeout},
		tokens: make(chan int64, workers), stopCh: make(chan struct{}),
		lastOK: make([]map[string]time.Time, len(gateways)),
	}
	for i := range l.lastOK {
		l.lastOK[i] = map[string]time.Time{}
	}
	return l
}

// start starts the pacer and the workers.
func (l *load) start() {
	l.started = time.Now()
	for range l.workers {
		l.wg.Add(1)
		go l.worker()
	}
	l.wg.Add(1)
	go l.pace()
}

// stop ends the load and waits for the requests in flight.
func (l *load) stop() {
	l.stopped.Do(func() {
		close(l.stopCh)
		l.wg.Wait()
		l.ended = time.Now()
		l.transport.CloseIdleConnections()
	})
}

func (l *load) pace() {
	defer l.wg.Done()
	defer close(l.tokens)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	var due int64
	for {
		select {
		case <-l.stopCh:
			return
		case <-tick.C:
		}
		for want := int64(time.Since(l.started).Seconds() * float64(l.rate)); due < want; due++ {
			select {
			case l.tokens <- l.issued.Add(1):
			default:
				l.issued.Add(-1)
				l.skipped.Add(1)
			}
		}
	}
}

func (l *load) worker() {
	defer l.wg.Done()
	for n := range l.tokens {
		s := l.do(n)
		l.mu.Lock()
		l.samples = append(l.samples, s)
		if !s.failed && s.instance != "" && s.at.After(l.lastOK[s.gateway][s.instance]) {
			l.lastOK[s.gateway][s.instance] = s.at
		}
		l.mu.Unlock()
	}
}

func (l *load) do(n int64) sample {
	s := sample{n: n, post: isPost(n), gateway: int(n) % len(l.gateways)}
	sym := symbols[int(n/2)%len(symbols)]
	var req *http.Request
	var err error
	if s.post {
		s.key = idempotencyKey(l.run, n)
		body := fmt.Sprintf(`{"symbol":%q,"qty":%d}`, sym, 1+n%9)
		req, err = http.NewRequestWithContext(context.Background(), http.MethodPost, l.gateways[s.gateway]+"/api/orders", strings.NewReader(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", s.key)
		}
	} else {
		req, err = http.NewRequestWithContext(context.Background(), http.MethodGet, l.gateways[s.gateway]+"/api/quote?symbol="+sym, nil)
	}
	s.at = time.Now()
	if err != nil {
		s.done, s.failed, s.reason = s.at, true, err.Error()
		return s
	}
	resp, err := l.client.Do(req)
	if err != nil {
		s.done, s.failed, s.reason = time.Now(), true, transportReason(err)
		return s
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	s.done = time.Now()
	switch {
	case resp.StatusCode != http.StatusOK:
		s.failed, s.reason = true, fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	case rerr != nil:
		s.failed, s.reason = true, "reading body: "+transportReason(rerr)
	default:
		s.instance = instanceOf(body)
	}
	return s
}

// routedSince tells whether every gateway has answered with every one of
// ids for a request sent after since[id].
func (l *load) routedSince(since map[string]time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.lastOK {
		for id, t := range since {
			if !m[id].After(t) {
				return false
			}
		}
	}
	return true
}

// completed is the number of requests answered or failed so far.
func (l *load) completed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.samples)
}

// all returns every sample; call it after stop.
func (l *load) all() []sample {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sample(nil), l.samples...)
}

// instanceOf returns the "instance" field of a JSON answer, or "".
func instanceOf(body []byte) string {
	var v struct {
		Instance string `json:"instance"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	return v.Instance
}

// transportReason drops the method and URL from a client error.
func transportReason(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return "timeout"
		}
		err = ue.Err
	}
	return err.Error()
}

// shorten folds white space and cuts s to n bytes.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
