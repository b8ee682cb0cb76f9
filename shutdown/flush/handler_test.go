package flush_test

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/shutdown/flush"
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
				req.Header.Set("Content-Type", "application/json")
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
				req.Header.Set(flush.HeaderSignature, "zz")
				return req
			},
			want: http.StatusUnauthorized,
		},
		{
			name: "a stale request is unauthorized",
			give: func(url string) *http.Request {
				return signedRequest(t, url, secret, self, now.Add(-2*flush.DefaultTimestampWindow))
			},
			want: http.StatusUnauthorized,
		},
		{
			name: "a request from the future is unauthorized",
			give: func(url string) *http.Request {
				return signedRequest(t, url, secret, self, now.Add(2*flush.DefaultTimestampWindow))
			},
			want: http.StatusUnauthorized,
		},
		{
			name: "an oversized request is refused",
			give: func(url string) *http.Request {
				big := self
				big.ID = strings.Repeat("x", flush.DefaultMaxBodyBytes)
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
				return signedRequest(t, url, secret, flush.Self{Service: "orders"}, now)
			},
			want: http.StatusBadRequest,
		},
		{
			name: "a signed request without a czxid is a bad request",
			give: func(url string) *http.Request {
				return signedFlush(t, url, secret, request(self, 0, url), now)
			},
			want: http.StatusBadRequest,
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
			resp := testutil.Do(t, tt.give(gw.URL))
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
	body := []byte(`{"service":"orders","id":"orders-1","address":"10.0.0.7","port":8080,"czxid":7,"target":"` + gw.URL + `"}`)
	now := time.Now()
	if resp := testutil.Do(t, signedRaw(t, gw.URL, secret, body, now, "nonce-1")); resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: status %d", resp.StatusCode)
	}
	if resp := testutil.Do(t, signedRaw(t, gw.URL, secret, body, now, "nonce-1")); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("replay: status %d, want 401", resp.StatusCode)
	}
	if n := ev.count(); n != 1 {
		t.Errorf("evicted %d times, want 1", n)
	}
}

func TestHandlerIsIdempotentOnValidRepeats(t *testing.T) {
	gw, ev := newGateway(t)
	for i := range 3 {
		if resp := testutil.Do(t, signedRequest(t, gw.URL, secret, self, time.Now())); resp.StatusCode != http.StatusOK {
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
	if resp := testutil.Do(t, signedRequest(t, gw.URL, secret, self, time.Now())); resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("status %d, want 500", resp.StatusCode)
	}
}

func TestNewHandlerRejectsInvalidInput(t *testing.T) {
	lookup := flush.EvicterMap(nil)
	auds := []string{"http://gw.example:8080/flush"}
	tests := []struct {
		name  string
		give  func() error
		wantE string
	}{
		{"a short secret", func() error { _, err := flush.NewHandler([]byte("short"), auds, lookup); return err }, "flush: secret is 5 bytes (minimum 16)"},
		{"a nil lookup", func() error { _, err := flush.NewHandler(secret, auds, nil); return err }, "flush: nil evicter lookup"},
		{"a tiny body limit", func() error {
			_, err := flush.NewHandler(secret, auds, lookup, flush.MaxBodyBytes(1))
			return err
		}, "flush: invalid max body bytes 1 (minimum 64)"},
		{"a short window", func() error {
			_, err := flush.NewHandler(secret, auds, lookup, flush.TimestampWindow(time.Millisecond))
			return err
		}, "flush: invalid timestamp window 1ms (minimum 1s)"},
		{"no audience", func() error { _, err := flush.NewHandler(secret, nil, lookup); return err },
			"flush: 0 audiences (minimum 1: the flush URLs the handler answers at)"},
		{"a relative audience", func() error { _, err := flush.NewHandler(secret, []string{"/flush"}, lookup); return err },
			`flush: invalid flush URL "/flush" (need an absolute http or https URL)`},
		{"a nil refusal counter", func() error {
			_, err := flush.NewHandler(secret, auds, lookup, flush.RefusalCounter(nil))
			return err
		},
			"flush: nil refusal counter"},
		{"an empty nonce cache", func() error {
			_, err := flush.NewHandler(secret, auds, lookup, flush.NonceCacheSize(0))
			return err
		}, "flush: invalid nonce cache size 0 (minimum 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is rejected", func(t *testing.T) {
			if err := tt.give(); err == nil || err.Error() != tt.wantE {
				t.Errorf("got %v, want %q", err, tt.wantE)
			}
		})
	}
}
