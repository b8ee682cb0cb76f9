package endpoint

import (
	"context"
	"errors"
	"github.com/gracekit/gracekit/internal/testutil"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kithttp "github.com/go-kit/kit/transport/http"
)

func encodeNothing(context.Context, *http.Request, any) error { return nil }

func decodeBody(_ context.Context, resp *http.Response) (any, error) {
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// server is an httptest server answering its name; draining makes it set the
// closing header; calls counts requests.
type server struct {
	*httptest.Server
	name     string
	draining atomic.Bool
	calls    atomic.Int64
}

func newServer(t *testing.T, name string, hold <-chan struct{}, entered chan<- struct{}) *server {
	t.Helper()
	s := &server{name: name}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		if hold != nil {
			entered <- struct{}{}
			<-hold
		}
		if s.draining.Load() {
			w.Header().Set(ClosingHeader, ClosingValue)
		}
		_, _ = io.WriteString(w, name)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) instance() string { return strings.TrimPrefix(s.URL, "http://") }

func newTestHTTPFactory(t *testing.T) *HTTPFactory {
	t.Helper()
	f, err := NewHTTPFactory(http.MethodPost, "/echo", encodeNothing, decodeBody)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func TestNewHTTPFactoryRejectsBadInput(t *testing.T) {
	tests := []struct {
		name   string
		method string
		enc    kithttp.EncodeRequestFunc
		dec    kithttp.DecodeResponseFunc
		give   HTTPOption
	}{
		{name: "an empty method is rejected", enc: encodeNothing, dec: decodeBody},
		{name: "a nil encoder is rejected", method: "GET", dec: decodeBody},
		{name: "a nil decoder is rejected", method: "GET", enc: encodeNothing},
		{name: "an unknown scheme is rejected", method: "GET", enc: encodeNothing, dec: decodeBody, give: HTTPScheme("ftp")},
		{name: "a nil transport is rejected", method: "GET", enc: encodeNothing, dec: decodeBody, give: WithTransport(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []HTTPOption
			if tt.give != nil {
				opts = append(opts, tt.give)
			}
			_, err := NewHTTPFactory(tt.method, "/", tt.enc, tt.dec, opts...)
			if err == nil || !strings.HasPrefix(err.Error(), "endpoint: ") {
				t.Fatalf("got %v, want an error starting with \"endpoint: \"", err)
			}
		})
	}
}

func TestHTTPFactoryClassifiesResponsesAndTransportErrors(t *testing.T) {
	unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer unavailable.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	goneAddr := gone.Listener.Addr().String()
	gone.Close()

	f := newTestHTTPFactory(t)
	tests := []struct {
		name string
		give string
		want Class
	}{
		{name: "a 503 is retryable", give: strings.TrimPrefix(unavailable.URL, "http://"), want: Retryable},
		{name: "a refused connection was not sent", give: goneAddr, want: NotSent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep, _, err := f.Factory(tt.give)
			if err != nil {
				t.Fatal(err)
			}
			_, err = ep(context.Background(), nil)
			if err == nil || Classify(err) != tt.want {
				t.Fatalf("error %v classified %v, want %v", err, Classify(err), tt.want)
			}
		})
	}
}

func TestTheClosingHeaderStopsPicksButKeepsTheResponse(t *testing.T) {
	a, b := newServer(t, "a", nil, nil), newServer(t, "b", nil, nil)
	a.draining.Store(true)
	f := newTestHTTPFactory(t)
	e, err := NewEndpointer(newChanInstancer(a.instance(), b.instance()), f.Factory)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rr, _ := NewRoundRobin(e)
	ep, _ := NewRetry(rr)

	gotA := false
	for range 20 {
		got, err := ep(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got == "a" {
			if gotA {
				t.Fatal("the closing instance was picked again")
			}
			gotA = true
		}
	}
	if !gotA {
		t.Fatal("the first response from the closing instance was not returned")
	}
}

// TestAnInstanceShutDownMidLoadFailsNoCall closes one of two servers while
// workers call through Retry; every call must succeed.
func TestAnInstanceShutDownMidLoadFailsNoCall(t *testing.T) {
	tests := []struct {
		name     string
		graceful bool // drain with the closing header and deregister first
	}{
		{name: "an abrupt shutdown fails no call"},
		{name: "a graceful shutdown fails no call", graceful: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := newServer(t, "a", nil, nil), newServer(t, "b", nil, nil)
			f := newTestHTTPFactory(t)
			src := newChanInstancer(a.instance(), b.instance())
			e, err := NewEndpointer(src, f.Factory)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			p2c, _ := NewP2C(e)
			ep, _ := NewRetry(p2c)

			const (
				workers   = 4
				perWorker = 150
			)
			var (
				done     atomic.Int64
				failures atomic.Int64
				firstErr atomic.Value
				wg       sync.WaitGroup
				halfway  = make(chan struct{})
				once     sync.Once
			)
			for range workers {
				wg.Go(func() {
					for range perWorker {
						if _, err := ep(context.Background(), nil); err != nil {
							failures.Add(1)
							firstErr.CompareAndSwap(nil, err)
						}
						if done.Add(1) == workers*perWorker/3 {
							once.Do(func() { close(halfway) })
						}
					}
				})
			}
			<-halfway
			if tt.graceful {
				a.draining.Store(true)
				testutil.WaitFor(t, "the closing instance to leave rotation", func() bool {
					before := a.calls.Load()
					for range 20 {
						if _, err := ep(context.Background(), nil); err != nil {
							return false
						}
					}
					return a.calls.Load() == before
				})
				src.Set(b.instance())
			}
			a.Close()
			wg.Wait()
			if n := failures.Load(); n != 0 {
				t.Fatalf("%d of %d calls failed while b was up; first: %v", n, workers*perWorker, firstErr.Load())
			}
			if a.calls.Load() == 0 || b.calls.Load() == 0 {
				t.Fatalf("calls a=%d b=%d, want both served", a.calls.Load(), b.calls.Load())
			}
		})
	}
}

func TestACallInFlightOnARemovedHTTPInstanceCompletes(t *testing.T) {
	hold, entered := make(chan struct{}), make(chan struct{}, 1)
	a := newServer(t, "a", hold, entered)
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(hold) }) }
	t.Cleanup(release) // runs before the server's Close, even on failure
	f := newTestHTTPFactory(t)
	var closed atomic.Int32
	factory := func(instance string) (kitendpoint.Endpoint, io.Closer, error) {
		ep, c, err := f.Factory(instance)
		return ep, closerFunc(func() error { closed.Add(1); return c.Close() }), err
	}
	src := newChanInstancer(a.instance())
	e, err := NewEndpointer(src, factory)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rr, _ := NewRoundRobin(e)
	ep, _ := NewRetry(rr)

	result := make(chan error, 1)
	go func() {
		got, err := ep(context.Background(), nil)
		if err == nil && got != "a" {
			err = errors.New("wrong answer")
		}
		result <- err
	}()
	<-entered
	src.Set()
	settle(e)
	if closed.Load() != 0 {
		t.Fatal("closed while a call was in flight")
	}
	release()
	if err := <-result; err != nil {
		t.Fatalf("in-flight call on a removed instance: %v", err)
	}
	if closed.Load() != 1 {
		t.Fatalf("closed %d times after the call, want 1", closed.Load())
	}
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }
