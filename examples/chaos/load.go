package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gracekit/gracekit/examples/internal/drive"
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
	noRetry  bool   // sent through a gateway that retries nothing (load.noRetry)
}

// idempotencyKey is the key of the n-th request of run.
func idempotencyKey(run string, n int64) string { return fmt.Sprintf("%s-%d", run, n) }

// load sends rate requests per second through the gateways, in turn, from
// a pool of workers, until stopped. It does not catch up: a request due
// while every worker is busy is skipped (and counted), so the rate stays
// steady rather than bursting after a stall.
type load struct {
	gateways []string // base URLs
	run      string   // prefix of the idempotency keys
	rate     int
	workers  int
	client   *http.Client
	// noRetry marks, by index, the gateways that retry no call (a plain
	// grpc-go client): what a crash cuts on them is the crash's, GET or
	// POST. Set before start; nil: every gateway retries GETs.
	noRetry []bool

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
	l := &load{
		gateways: gateways, run: run, rate: rate, workers: workers,
		client: drive.NewClient(workers, timeout),
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
		l.client.CloseIdleConnections()
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
	s := sample{n: n, post: drive.IsPost(n), gateway: int(n) % len(l.gateways)}
	s.noRetry = s.gateway < len(l.noRetry) && l.noRetry[s.gateway]
	sym := drive.Symbols[int(n/2)%len(drive.Symbols)]
	if s.post {
		s.key = idempotencyKey(l.run, n)
	}
	req, err := drive.NewRequest(context.Background(), l.gateways[s.gateway], n, sym, s.key)
	s.at = time.Now()
	if err != nil {
		s.done, s.failed, s.reason = s.at, true, err.Error()
		return s
	}
	status, body, rerr, err := drive.Do(l.client, req)
	s.done = time.Now()
	switch {
	case err != nil:
		s.failed, s.reason = true, drive.TransportReason(err)
	case status != http.StatusOK:
		s.failed, s.reason = true, fmt.Sprintf("HTTP %d: %s", status, bytes.TrimSpace(body))
	case rerr != nil:
		s.failed, s.reason = true, "reading body: "+drive.TransportReason(rerr)
	default:
		s.instance = drive.InstanceOf(body)
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
