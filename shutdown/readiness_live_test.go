package shutdown_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/gracekit/gracekit/shutdown"
)

// Issue 42: a stale view (SetLive(false)) makes a ready instance not
// ready, /readyz says why, followers hear each change once, and the stop
// wins over everything.
func TestAStaleViewIsNotReady(t *testing.T) {
	r := new(shutdown.Readiness)
	var heard []bool
	cancel := r.Notify(func(ready bool) { heard = append(heard, ready) })
	defer cancel()
	r.SetLive(false)
	r.SetReady() // stale: not ready, nothing to tell
	if r.Ready() {
		t.Fatal("ready while stale")
	}
	if code, body := readyz(r); code != http.StatusServiceUnavailable || body != "serving from a snapshot\n" {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	r.SetHealthy(false) // sick too: still not ready, nothing to tell
	r.SetHealthy(true)
	r.SetLive(true)
	if !r.Ready() {
		t.Fatal("not ready once live")
	}
	r.SetLive(true) // no change
	r.SetLive(false)
	r.SetUnready()
	r.SetLive(true) // stopping: stays not ready
	if r.Ready() {
		t.Fatal("ready while stopping")
	}
	if want := []bool{false, true, false}; !slices.Equal(heard, want) {
		t.Fatalf("notified %v, want %v", heard, want)
	}
}

func readyz(r *shutdown.Readiness) (int, string) {
	rec := httptest.NewRecorder()
	r.ReadyHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	body, _ := io.ReadAll(rec.Body)
	return rec.Code, string(body)
}
