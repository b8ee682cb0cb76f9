package shutdown_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gracekit/gracekit/shutdown"
)

// Issue 32: /readyz says why a ready instance is out: its health check, or
// an operator's drain.
func TestReadyzSaysDrainedByOperator(t *testing.T) {
	tests := []struct {
		name             string
		healthy, drained bool
		wantCode         int
		wantBody         string
	}{
		{"a healthy instance is ok", true, false, http.StatusOK, "ok"},
		{"a failing health check says unhealthy", false, false, http.StatusServiceUnavailable, "unhealthy"},
		{"an operator drain says so", false, true, http.StatusServiceUnavailable, "drained by operator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := new(shutdown.Readiness)
			r.SetReady()
			r.SetDrained(tt.drained)
			r.SetHealthy(tt.healthy)
			rec := httptest.NewRecorder()
			r.ReadyHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != tt.wantCode || !containsLine(string(body), tt.wantBody) {
				t.Errorf("/readyz: %d %q, want %d %q", rec.Code, body, tt.wantCode, tt.wantBody)
			}
		})
	}
}

func containsLine(body, want string) bool {
	for len(body) > 0 && (body[len(body)-1] == '\n') {
		body = body[:len(body)-1]
	}
	return body == want
}
