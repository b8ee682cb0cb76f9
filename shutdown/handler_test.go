package shutdown_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gracekit/gracekit/shutdown"
)

func TestHandlerRefusesBadRequestsAndEvictsNothing(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name string
		give func(url string) *http.Request
		want int
	}{
		{
			name: "an unsigned request is unauthorized",
			give: func(url string) *http.Request {
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"service":"orders","id":"orders-1"}`))
				return req
			},
			want: http.StatusUnauthorized,
		},
		{
			name: "a request signed with another secret is unauthorized",
			give: func(url string) *http.Request {
				return signedRequest(t, url, []byte("not-the-shared-secret"), self, now)
			},
			want: http.StatusUnauthorized,
		},
		{
			name: "a request whose body was changed after signing is unauthorized",
			give: func(url string) *http.Request {
				req := signedRequest(t, url, secret, self, now)
				other := []byte(`{"service":"orders","id":"orders-2"}`)
				req.Body, req.ContentLength = http.NoBody, int64(len(other))
				req.Body = nopCloser{bytes.NewReader(other)}
				return req
			},
			want: http.StatusUnauthorized,
		},
		{
			name: "a request with a garbled signature is unauthorized",
			give: func(url string) *http.Request {
				req := signedRequest(t, url, secret, self, now)
				req.Header.Set(shutdown.HeaderSignature, "zz")
				return req
			},
			want: http.StatusUnauthorized,
		},
		{
			name: "a stale request is unauthorized",
			give: func(url string) *http.Request {
				return signedRequest(t, url, secret, self, now.Add(-2*shutdown.DefaultTimestampWindow))
			},
			want: http.StatusUnauthorized,
		},
		{
			name: "a request from the future is unauthorized",
			give: func(url string) *http.Request {
				return signedRequest(t, url, secret, self, now.Add(2*shutdown.DefaultTimestampWindow))
			},
			want: http.StatusUnauthorized,
		},
		{
			name: "an oversized request is refused",
			give: func(url string) *http.Request {
				big := self
				big.ID = strings.Repeat("x", shutdown.DefaultMaxBodyBytes)
				return signedRequest(t, url, secret, big, now)
			},
			want: http.StatusRequestEntityTooLarge,
		},
		{
			name: "a signed request with a malformed body is a bad request",
			give: func(url string) *http.Request {
				return signedRaw(t, url, secret, []byte(`{"service":`), now, "n1")
			},
			want: http.StatusBadRequest,
		},
		{
			name: "a signed request without an id is a bad request",
			give: func(url string) *http.Request {
				return signedRequest(t, url, secret, shutdown.Instance{Service: "orders"}, now)
			},
			want: http.StatusBadRequest,
		},
		{
			name: "a signed request for an unknown service is not found",
			give: func(url string) *http.Request {
				return signedRequest(t, url, secret, shutdown.Instance{Service: "billing", ID: "b-1"}, now)
			},
			want: http.StatusNotFound,
		},
		{
			name: "a GET is not allowed",
			give: func(url string) *http.Request {
				req := signedRequest(t, url, secret, self, now)
				req.Method = http.MethodGet
				return req
			},
			want: http.StatusMethodNotAllowed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gw, ev := newGateway(t)
			resp := do(t, tt.give(gw.URL))
			if resp.StatusCode != tt.want {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.want)
			}
			if n := ev.count(); n != 0 {
				t.Errorf("%d instance(s) evicted, want none", n)
			}
		})
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

func TestHandlerRefusesAReplay(t *testing.T) {
	gw, ev := newGateway(t)
	body := []byte(`{"service":"orders","id":"orders-1","address":"10.0.0.7","port":8080}`)
	now := time.Now()
	if resp := do(t, signedRaw(t, gw.URL, secret, body, now, "nonce-1")); resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: status %d", resp.StatusCode)
	}
	if resp := do(t, signedRaw(t, gw.URL, secret, body, now, "nonce-1")); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("replay: status %d, want 401", resp.StatusCode)
	}
	if n := ev.count(); n != 1 {
		t.Errorf("evicted %d times, want 1", n)
	}
}

func TestHandlerIsIdempotentOnValidRepeats(t *testing.T) {
	gw, ev := newGateway(t)
	for i := range 3 {
		if resp := do(t, signedRequest(t, gw.URL, secret, self, time.Now())); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
	if n := ev.count(); n != 3 {
		t.Errorf("Evict called %d times, want 3", n)
	}
	if ev.got[0] != self {
		t.Errorf("evicted %+v, want %+v", ev.got[0], self)
	}
}

func TestHandlerAnswers500WhenEvictFails(t *testing.T) {
	gw, ev := newGateway(t)
	ev.fail = errors.New("instancer stopped")
	if resp := do(t, signedRequest(t, gw.URL, secret, self, time.Now())); resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("status %d, want 500", resp.StatusCode)
	}
}

func TestHandlerRefusesReplaysOfForgottenNonces(t *testing.T) {
	ev := &evictions{}
	h, err := shutdown.NewHandler(secret, shutdown.EvicterMap(map[string]shutdown.Evicter{"orders": ev}), shutdown.NonceCacheSize(2))
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"service":"orders","id":"orders-1"}`)
	old := time.Now().Add(-5 * time.Second)
	send := func(nonce string, ts time.Time) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, signedRaw(t, "http://gw/flush", secret, body, ts, nonce))
		return rec.Code
	}
	tests := []struct {
		name  string
		nonce string
		ts    time.Time
		want  int
	}{
		{"the first nonce is accepted", "a", old, http.StatusOK},
		{"the second nonce fills the cache", "b", old, http.StatusOK},
		{"a third nonce of the same second forgets the first and is refused", "c", old, http.StatusUnauthorized},
		{"the replay of the forgotten nonce is refused", "a", old, http.StatusUnauthorized},
		{"a fresh request is accepted", "d", time.Now(), http.StatusOK},
	}
	for _, tt := range tests {
		if got := send(tt.nonce, tt.ts); got != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, got, tt.want)
		}
	}
	if n := ev.count(); n != 3 {
		t.Errorf("evicted %d times, want 3", n)
	}
}

func TestNewHandlerRejectsInvalidInput(t *testing.T) {
	lookup := shutdown.EvicterMap(nil)
	tests := []struct {
		name  string
		give  func() error
		wantE string
	}{
		{"a short secret", func() error { _, err := shutdown.NewHandler([]byte("short"), lookup); return err }, "shutdown: secret is 5 bytes (minimum 16)"},
		{"a nil lookup", func() error { _, err := shutdown.NewHandler(secret, nil); return err }, "shutdown: nil evicter lookup"},
		{"a notifier option", func() error { _, err := shutdown.NewHandler(secret, lookup, shutdown.RetryMax(1)); return err }, "shutdown: option RetryMax does not apply to NewHandler"},
		{"a tiny body limit", func() error { _, err := shutdown.NewHandler(secret, lookup, shutdown.MaxBodyBytes(1)); return err }, "shutdown: invalid max body bytes 1 (minimum 64)"},
		{"a short window", func() error {
			_, err := shutdown.NewHandler(secret, lookup, shutdown.TimestampWindow(time.Millisecond))
			return err
		}, "shutdown: invalid timestamp window 1ms (minimum 1s)"},
		{"an empty nonce cache", func() error { _, err := shutdown.NewHandler(secret, lookup, shutdown.NonceCacheSize(0)); return err }, "shutdown: invalid nonce cache size 0 (minimum 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is rejected", func(t *testing.T) {
			if err := tt.give(); err == nil || err.Error() != tt.wantE {
				t.Errorf("got %v, want %q", err, tt.wantE)
			}
		})
	}
}
