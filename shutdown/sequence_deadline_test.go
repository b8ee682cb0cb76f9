package shutdown_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/gracekit/gracekit/lifecycle"
)

// Issue 8, case 16: a Stop that starts with an expired ctx still marks the
// instance unready, deregisters, drains the requests in flight and closes
// the session; only the other steps are skipped.
func TestSequenceStopWithAnExpiredContextStillUnreadiesAndDrains(t *testing.T) {
	gw, _ := newGateway(t)
	p := newProvider(t, []string{gw.URL}, nil)
	release := make(chan struct{})
	p.server.RegisterOnShutdown(func() { close(release) }) // once the drain began
	entered := make(chan struct{})
	p.mux.HandleFunc("/slow", func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "done")
	})
	if err := p.seq.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	slow := getAsync(t, "http://"+p.seq.Addr().String()+"/slow")
	<-entered

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := p.seq.Stop(ctx)
	if !errors.Is(err, lifecycle.ErrSkipped) {
		t.Errorf("Stop = %v, want the other steps skipped", err)
	}
	if got, want := p.trace(lifecycle.PhaseStop), "readiness status- registration flush- quiesce- serve listen- session"; got != want {
		t.Errorf("stop order:\n got  %s\n want %s", got, want)
	}
	if p.readiness.Ready() {
		t.Error("still ready after Stop")
	}
	if resp := <-slow; resp == nil || resp.StatusCode != http.StatusOK {
		t.Errorf("the request in flight got %+v, want 200", resp)
	}
	if !p.closed.Load() {
		t.Error("the session was not closed")
	}
	if r := p.seq.Report(); r.CutByDrain != 0 || r.InFlightAtDrain != 1 {
		t.Errorf("report: cut %d, in flight at drain %d; want 0, 1", r.CutByDrain, r.InFlightAtDrain)
	}
}
