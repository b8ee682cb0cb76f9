package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kitsd "github.com/go-kit/kit/sd"
)

// Issue 39, item 6: what NewHTTPFactory does with a non-2xx answer, as
// its doc says. A 503 is the factory's: the decoder is not called, the
// error is a *StatusError matching ErrUnavailable, retried on another
// instance. Every other status goes to the decoder as it is, and the
// decoder's result is the call's: a value for a body it decodes, an error
// that is not retried unless it is of a retryable class (encoding/json's
// io.EOF for an empty body is), or one matching ErrUnavailable the
// decoder returns on purpose.
func TestHTTPFactoryGivesEveryStatusButA503ToTheDecoder(t *testing.T) {
	tests := []struct {
		name         string
		status       int
		body         string
		wantDecoded  bool  // the decoder was called
		wantAttempts int64 // requests the servers received
		wantErr      error // errors.Is; nil for success
		wantValue    bool
	}{
		{name: "a 503 is retried, the decoder not called", status: 503, body: "busy", wantAttempts: 3, wantErr: ErrUnavailable},
		{name: "a 500 with a text body is the decoder's error, not retried", status: 500, body: "oops", wantDecoded: true, wantAttempts: 1, wantErr: errSyntax},
		{name: "a 404 with an empty body is the decoder's io.EOF, retried", status: 404, wantDecoded: true, wantAttempts: 3, wantErr: io.EOF},
		{name: "a 404 with a JSON body is the decoder's value", status: 404, body: `{"error":"no such symbol"}`, wantDecoded: true, wantAttempts: 1, wantValue: true},
		{name: "a 502 the decoder calls unavailable is retried", status: 502, body: "{}", wantDecoded: true, wantAttempts: 3, wantErr: ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var requests atomic.Int64
			var instances kitsd.FixedInstancer
			for range 3 {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					requests.Add(1)
					w.WriteHeader(tt.status)
					_, _ = io.WriteString(w, tt.body)
				}))
				defer srv.Close()
				instances = append(instances, strings.TrimPrefix(srv.URL, "http://"))
			}
			var decoded atomic.Int64
			dec := func(_ context.Context, r *http.Response) (any, error) {
				decoded.Add(1)
				if r.StatusCode == http.StatusBadGateway {
					return nil, fmt.Errorf("quote answered %d: %w", r.StatusCode, ErrUnavailable)
				}
				var v map[string]any
				err := json.NewDecoder(r.Body).Decode(&v)
				var se *json.SyntaxError
				if errors.As(err, &se) {
					err = fmt.Errorf("%w: %w", errSyntax, err)
				}
				return v, err
			}
			f, err := NewHTTPFactory(http.MethodGet, "/quote", encodeNothing, dec)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			e, err := NewEndpointer(instances, f.Factory)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			rr, _ := NewRoundRobin(e)
			call, err := NewRetry(rr, Attempts(3), Backoff(time.Millisecond, time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			v, err := call(context.Background(), nil)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("call: %v, want the decoder's value", err)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("call: %v, want an error matching %v", err, tt.wantErr)
			}
			if tt.wantValue && v.(map[string]any)["error"] != "no such symbol" {
				t.Errorf("value %v, want the 404's decoded body", v)
			}
			if got := requests.Load(); got != tt.wantAttempts {
				t.Errorf("%d requests, want %d", got, tt.wantAttempts)
			}
			if got := decoded.Load() > 0; got != tt.wantDecoded {
				t.Errorf("decoder called %d times, want called: %v", decoded.Load(), tt.wantDecoded)
			}
			var se *StatusError
			if tt.status == 503 && (!errors.As(err, &se) || se.Code != 503) {
				t.Errorf("a 503: %v, want a *StatusError with its code", err)
			}
		})
	}
}

var errSyntax = errors.New("not JSON")
