package shutdown_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/gracekit/gracekit/shutdown"
)

// Issue 8, case 19: SetReady racing SetUnready must never leave the
// instance ready, and once unready at stop it never becomes ready again.
func TestReadinessSetReadyRacingSetUnreadyNeverEndsReady(t *testing.T) {
	const rounds = 20000
	for i := range rounds {
		var r shutdown.Readiness
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			r.SetReady()
		}()
		go func() {
			defer wg.Done()
			<-start
			r.SetUnready()
		}()
		close(start)
		wg.Wait()
		if r.Ready() {
			t.Fatalf("round %d: ready after SetReady raced SetUnready", i)
		}
		r.SetReady()
		if r.Ready() {
			t.Fatalf("round %d: SetReady after SetUnready made the instance ready", i)
		}
		if i%1000 == 0 {
			rec := httptest.NewRecorder()
			r.ReadyHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if rec.Code != http.StatusServiceUnavailable || rec.Body.String() != "stopping\n" {
				t.Fatalf("round %d: /readyz = %d %q, want 503 stopping", i, rec.Code, rec.Body.String())
			}
		}
	}
}
