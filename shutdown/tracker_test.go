package shutdown_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/shutdown"
)

func TestTrackerDrainWaitsForRequestsInFlight(t *testing.T) {
	var tr shutdown.Tracker
	end1, end2 := tr.Begin(), tr.Begin()
	done := make(chan error, 1)
	go func() { done <- tr.Drain(context.Background()) }()
	end1()
	end1() // a second call is harmless
	if tr.InFlight() != 1 {
		t.Fatalf("InFlight = %d, want 1", tr.InFlight())
	}
	select {
	case err := <-done:
		t.Fatalf("Drain returned %v with a request in flight", err)
	default:
	}
	end2()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Drain = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Drain did not return once idle")
	}
}

func TestTrackerDrainStopsAtItsContext(t *testing.T) {
	var tr shutdown.Tracker
	end := tr.Begin()
	defer end()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := tr.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Drain = %v, want DeadlineExceeded", err)
	}
}

func TestTrackerCountsRequestsAfterDeregistration(t *testing.T) {
	var tr shutdown.Tracker
	tr.Begin()()
	if !tr.LastArrival().After(time.Time{}) {
		t.Error("LastArrival is zero after a request")
	}
	tr.MarkDeregistered()
	tr.Begin()()
	tr.Begin()()
	if got := tr.AfterDeregistration(); got != 2 {
		t.Errorf("AfterDeregistration = %d, want 2", got)
	}
}

func TestTrackerMiddlewareSetsTheClosingHeaderWhileDraining(t *testing.T) {
	tests := []struct {
		name     string
		give     http.HandlerFunc
		draining bool
		want     string
	}{
		{"a response before draining has no closing header", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hi")) }, false, ""},
		{"a written response while draining has the closing header", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hi")) }, true, endpoint.ClosingValue},
		{"an explicit status while draining has the closing header", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }, true, endpoint.ClosingValue},
		{"an empty response while draining has the closing header", func(http.ResponseWriter, *http.Request) {}, true, endpoint.ClosingValue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tr shutdown.Tracker
			if tt.draining {
				tr.StartDraining()
			}
			srv := httptest.NewServer(tr.Middleware(tt.give))
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			resp := testutil.Do(t, req)
			if got := resp.Header.Get(endpoint.ClosingHeader); got != tt.want {
				t.Errorf("%s = %q, want %q", endpoint.ClosingHeader, got, tt.want)
			}
		})
	}
}

func TestTrackerEndpointMiddlewareCountsCalls(t *testing.T) {
	var tr shutdown.Tracker
	var during int
	ep := tr.EndpointMiddleware()(func(context.Context, any) (any, error) {
		during = tr.InFlight()
		return "ok", nil
	})
	if _, err := ep(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if during != 1 || tr.InFlight() != 0 {
		t.Errorf("in flight during = %d, after = %d; want 1, 0", during, tr.InFlight())
	}
}

func TestReadinessProbes(t *testing.T) {
	tests := []struct {
		name      string
		give      func(*shutdown.Readiness)
		wantReady int
	}{
		{"an instance not yet registered is not ready", func(*shutdown.Readiness) {}, http.StatusServiceUnavailable},
		{"a registered instance is ready", (*shutdown.Readiness).SetReady, http.StatusOK},
		{"a stopping instance is not ready", func(r *shutdown.Readiness) { r.SetReady(); r.SetUnready() }, http.StatusServiceUnavailable},
		{"a stopping instance never becomes ready again", func(r *shutdown.Readiness) { r.SetUnready(); r.SetReady() }, http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r shutdown.Readiness
			tt.give(&r)
			rec := httptest.NewRecorder()
			r.ReadyHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if rec.Code != tt.wantReady {
				t.Errorf("/readyz = %d, want %d", rec.Code, tt.wantReady)
			}
			rec = httptest.NewRecorder()
			r.LiveHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/livez", nil))
			if rec.Code != http.StatusOK {
				t.Errorf("/livez = %d, want 200", rec.Code)
			}
		})
	}
}
