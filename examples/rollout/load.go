package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gracekit/gracekit/examples/internal/drive"
)

// sample is one request of the load.
type sample struct {
	at       time.Time // when it was sent
	latency  time.Duration
	post     bool
	key      string // a POST's Idempotency-Key
	consumer int    // index of the consumer (gateway) it went through
	failed   bool
	reason   string // why it failed: "HTTP 502: ..." or the transport error
	upstream string // a failure's "upstream" (host:port of the provider the last attempt called), if named
	instance string // the provider named in the response, when there is one
}

// load is a fixed pool of workers that send requests through the
// consumers (gateways) until stopped, until maxRequests are sent, or until
// the context ends.
type load struct {
	gateways    []string // base URLs, "http://127.0.0.1:port", one per consumer
	keyPrefix   string   // of the POSTs' idempotency keys, unique per run and mode
	client      *http.Client
	maxRequests int64
	deadline    time.Time // no request is sent after it

	// active[i] tells whether gateway i is in rotation (all are, unless
	// setActive took one out).
	active []atomic.Bool

	issued    atomic.Int64
	completed atomic.Int64
	stopCh    chan struct{}
	stopOnce  sync.Once
	wg        sync.WaitGroup
	endedCh   chan struct{} // closed once every worker has returned
	started   time.Time
	stoppedAt time.Time

	mu      sync.Mutex
	samples [][]sample             // per worker
	seen    []map[string]time.Time // per gateway: instance -> last response time
	fails   atomic.Int64
}

func newLoad(gateways []string, keyPrefix string, workers int, maxRequests int64, timeout time.Duration, deadline time.Time) *load {
	l := &load{
		gateways:    gateways,
		keyPrefix:   keyPrefix,
		client:      drive.NewClient(workers, timeout),
		maxRequests: maxRequests,
		deadline:    deadline,
		stopCh:      make(chan struct{}),
		endedCh:     make(chan struct{}),
		samples:     make([][]sample, workers),
		seen:        make([]map[string]time.Time, len(gateways)),
		active:      make([]atomic.Bool, len(gateways)),
	}
	for i := range l.active {
		l.active[i].Store(true)
	}
	for i := range l.seen {
		l.seen[i] = map[string]time.Time{}
	}
	return l
}

// run starts the workers.
func (l *load) run(ctx context.Context) {
	l.started = time.Now()
	for w := range l.samples {
		l.wg.Add(1)
		go l.worker(ctx, w)
	}
	go func() {
		l.wg.Wait()
		close(l.endedCh)
	}()
}

// stop asks the workers to finish their current request and waits for them.
func (l *load) stop() {
	l.stopOnce.Do(func() { close(l.stopCh) })
	l.wg.Wait()
	if l.stoppedAt.IsZero() {
		l.stoppedAt = time.Now()
	}
	l.client.CloseIdleConnections()
}

func (l *load) worker(ctx context.Context, w int) {
	defer l.wg.Done()
	var out []sample
	defer func() {
		l.mu.Lock()
		l.samples[w] = out
		l.mu.Unlock()
	}()
	for i := 0; ; i++ {
		select {
		case <-l.stopCh:
			return
		case <-ctx.Done():
			return
		default:
		}
		if time.Now().After(l.deadline) {
			return
		}
		gw, ok := l.pick(w + i) // go round the consumers in rotation
		if !ok {
			// None in rotation: wait, as a client behind an empty load
			// balancer would, rather than count a failure.
			t := time.NewTimer(10 * time.Millisecond)
			select {
			case <-t.C:
			case <-l.stopCh:
			case <-ctx.Done():
			}
			t.Stop()
			continue
		}
		n := l.issued.Add(1)
		if n > l.maxRequests {
			return
		}
		s := l.do(ctx, gw, n)
		if ctx.Err() != nil {
			return // interrupted: the request says nothing about the service
		}
		out = append(out, s)
		l.completed.Add(1)
		if s.failed {
			l.fails.Add(1)
		} else if s.instance != "" {
			l.mu.Lock()
			l.seen[gw][s.instance] = time.Now()
			l.mu.Unlock()
		}
	}
}

func (l *load) do(ctx context.Context, gw int, n int64) sample {
	s := sample{at: time.Now(), post: isPost(n), consumer: gw}
	sym := drive.Symbols[int(n)%len(drive.Symbols)]
	if s.post {
		s.key = l.keyPrefix + strconv.FormatInt(n, 10)
	}
	req, err := drive.NewRequest(ctx, l.gateways[gw], n, sym, s.key)
	if err != nil {
		s.key = ""
		s.failed, s.reason = true, err.Error()
		return s
	}
	status, body, rerr, err := drive.Do(l.client, req)
	s.latency = time.Since(s.at)
	switch {
	case err != nil:
		s.failed, s.reason = true, transportReason(err)
	case status != http.StatusOK:
		s.failed, s.reason = true, fmt.Sprintf("HTTP %d: %s", status, drive.Shorten(drive.ErrorOf(body), 100))
		s.upstream = drive.UpstreamOf(body)
	case rerr != nil:
		s.failed, s.reason = true, "reading body: "+transportReason(rerr)
	default:
		s.instance = drive.InstanceOf(body)
	}
	return s
}

// isPost is drive.IsPost: one request in five is a POST /api/orders.
func isPost(n int64) bool { return drive.IsPost(n) }

// transportReason is drive.TransportReason, shortened.
func transportReason(err error) string { return drive.Shorten(drive.TransportReason(err), 100) }

// pick returns the first gateway in rotation from start on, going round;
// false when none is.
func (l *load) pick(start int) (int, bool) {
	n := len(l.gateways)
	for k := range n {
		if gw := (start + k) % n; l.active[gw].Load() {
			return gw, true
		}
	}
	return 0, false
}

// setActive puts gateway i in rotation or takes it out, as a load
// balancer in front of the gateways does: a request already sent to it
// is not recalled.
func (l *load) setActive(i int, on bool) { l.active[i].Store(on) }

// finished tells whether the workers reached their count or time bound.
func (l *load) finished() bool {
	return l.issued.Load() >= l.maxRequests || time.Now().After(l.deadline)
}

// ended tells whether every worker has returned: no request is in flight
// and none will be sent.
func (l *load) ended() bool {
	select {
	case <-l.endedCh:
		return true
	default:
		return false
	}
}

// seenSince tells whether each of the consumers (indexes) has answered
// with instance since t.
func (l *load) seenSince(instance string, t time.Time, consumers []int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range consumers {
		if !l.seen[c][instance].After(t) {
			return false
		}
	}
	return true
}

// all returns every sample once the workers have stopped.
func (l *load) all() []sample {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sample
	for _, s := range l.samples {
		out = append(out, s...)
	}
	return out
}
