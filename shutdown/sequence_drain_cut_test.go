package shutdown_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gracekit/gracekit/lifecycle"
	"github.com/gracekit/gracekit/shutdown"
)

// Issue 8, case 18: requests still in flight when the drain's bound ends
// are cut; the stop report counts them, the log says so, and Stop's error
// is a *shutdown.DrainError that names how many and the bound.
func TestSequenceReportsRequestsCutByTheDrainTimeout(t *testing.T) {
	const drainTimeout = 300 * time.Millisecond
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	p := newProvider(t, nil, func(c *shutdown.Config) {
		c.DrainTimeout = drainTimeout
		c.QuietWindow = 10 * time.Millisecond
	}, lifecycle.WithListener(lifecycle.SlogListener(log)))
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	p.mux.HandleFunc("/stuck", func(http.ResponseWriter, *http.Request) {
		entered <- struct{}{}
		<-release // a handler that ignores its request's end
	})
	if err := p.seq.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 2)
	for range 2 {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, "http://"+p.seq.Addr().String()+"/stuck", nil)
			req.Close = true
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			results <- err
		}()
	}
	<-entered
	<-entered

	err := p.seq.Stop(context.Background())
	close(release)
	for range 2 {
		if err := <-results; err == nil {
			t.Error("a request cut by the drain got a response")
		}
	}
	var derr *shutdown.DrainError
	if !errors.As(err, &derr) {
		t.Fatalf("Stop = %v, want a *shutdown.DrainError", err)
	}
	if derr.Cut != 2 || derr.Bound <= 0 || derr.Bound > drainTimeout {
		t.Errorf("DrainError = %+v, want 2 cut within a bound of at most %s", derr, drainTimeout)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop = %v, want it to wrap context.DeadlineExceeded", err)
	}
	r := p.seq.Report()
	if r.CutByDrain != 2 || r.InFlightAtDrain != 2 {
		t.Errorf("report: cut by drain = %d, in flight at drain = %d; want 2, 2", r.CutByDrain, r.InFlightAtDrain)
	}
	if !errors.As(r.Err, &derr) {
		t.Errorf("report error %v, want a *shutdown.DrainError", r.Err)
	}
	if !strings.Contains(logs.String(), "2 request(s) cut") {
		t.Errorf("the log does not say that 2 requests were cut:\n%s", logs.String())
	}
	t.Log(err)
}
