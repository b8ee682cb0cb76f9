package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
)

// Issue 22: ls and watch say who took an instance out. A provider whose
// health check fails is OUT_OF_SERVICE (by health), text and JSON; when
// the check passes again it is UP and unmarked; an operator's drain says
// (by operator) and wins over a failing check.
func TestLsAndWatchSayTheHealthCheckOrTheOperatorTookItOut(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	base := basePath("out-by")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := sd.NewSession(c.ConnectString(), sd.SessionTimeout(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var sick atomic.Bool
	p, err := provider.New(sess, provider.Config{
		Instance: sd.Instance{Name: "quote", ID: "q1", Address: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port},
		Server:   &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 5 * time.Second},
		Listener: ln,
		Health: provider.HealthCheck{Check: func(context.Context) error {
			if sick.Load() {
				return errors.New("the database is down")
			}
			return nil
		}, Interval: 20 * time.Millisecond, Timeout: testutil.WaitLimit, Failures: 2, Passes: 2, Hold: time.Millisecond}, // Timeout: see provider's instantCheckTimeout
	}, provider.WithRegistrarOptions(sd.BasePath(base)))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Stop(ctx)
	})
	ls := func() lsInstance { return lsJSON(t, on(c, base, "ls", "quote")...).Services[0].Instances[0] }
	lsText := func() string { _, out, _ := gk(t, on(c, base, "ls", "quote")...); return out }
	testutil.WaitFor(t, "q1 registered UP", func() bool {
		s := lsJSON(t, on(c, base, "ls", "quote")...).Services
		return len(s) == 1 && len(s[0].Instances) == 1 && s[0].Instances[0].Status == string(sd.StatusUp)
	})
	w := startWatch(t, on(c, base, "quote", "-o", "json")...)
	w.wait(t, "watching", is(evWatching, ""))
	text := startWatch(t, on(c, base, "quote")...)
	// Its first read must be done before the change, or it lists q1 out of
	// service as present and never prints the transition.
	testutil.WaitFor(t, "the text watch watching", func() bool {
		for _, l := range text.out.all() {
			if strings.Contains(l, evWatching+" ") {
				return true
			}
		}
		return false
	})

	sick.Store(true)
	ev := w.wait(t, "out by health", is(evStatus, "q1"))
	if ev.Status != string(sd.StatusOutOfService) || ev.OutBy != sd.OutByHealth || ev.DrainedBy != "" {
		t.Fatalf("watch: %+v, want OUT_OF_SERVICE out_by health", ev)
	}
	if in := ls(); in.Status != string(sd.StatusOutOfService) || in.OutBy != sd.OutByHealth || in.DrainedBy != "" || in.Metadata[sd.MetadataOutBy] != sd.OutByHealth {
		t.Fatalf("ls: %+v, want OUT_OF_SERVICE by health", in)
	}
	if out := lsText(); !strings.Contains(out, "OUT_OF_SERVICE (by health)") {
		t.Fatalf("ls text does not say health took it out:\n%s", out)
	}
	testutil.WaitFor(t, "watch text says by health", func() bool {
		for _, l := range text.out.all() {
			if strings.Contains(l, "UP -> OUT_OF_SERVICE (by health)") {
				return true
			}
		}
		return false
	})

	sick.Store(false)
	testutil.WaitFor(t, "UP again, unmarked", func() bool {
		in := ls()
		_, marked := in.Metadata[sd.MetadataOutBy]
		return in.Status == string(sd.StatusUp) && in.OutBy == "" && !marked
	})
	if out := lsText(); strings.Contains(out, "(by ") {
		t.Fatalf("ls text of an UP instance names who took it out:\n%s", out)
	}

	// Drained, and its check fails meanwhile: the operator wins.
	if code, out, stderr := gk(t, on(c, base, "drain", "quote", "q1", "-force")...); code != exitOK {
		t.Fatalf("drain: exit %d, %q %q", code, out, stderr)
	}
	sick.Store(true)
	testutil.WaitFor(t, "drained and out by health", func() bool {
		in := ls()
		return in.DrainedBy == sd.DrainedByOperator && in.Metadata[sd.MetadataOutBy] == sd.OutByHealth
	})
	if in := ls(); in.Status != string(sd.StatusOutOfService) || in.OutBy != sd.DrainedByOperator {
		t.Fatalf("ls: %+v, want OUT_OF_SERVICE by operator", in)
	}
	if out := lsText(); !strings.Contains(out, "OUT_OF_SERVICE (by operator)") {
		t.Fatalf("ls text does not say the operator took it out:\n%s", out)
	}
	w.wait(t, "watch says by operator", func(ev watchEvent) bool {
		return ev.ID == "q1" && ev.Status == string(sd.StatusOutOfService) && ev.OutBy == sd.DrainedByOperator
	})
	// Undrained while the check still fails: out, by health.
	if code, out, stderr := gk(t, on(c, base, "undrain", "quote", "q1")...); code != exitOK {
		t.Fatalf("undrain: exit %d, %q %q", code, out, stderr)
	}
	if in := ls(); in.Status != string(sd.StatusOutOfService) || in.OutBy != sd.OutByHealth || in.DrainedBy != "" {
		t.Fatalf("ls after undrain with a failing check: %+v, want OUT_OF_SERVICE by health", in)
	}
	sick.Store(false)
	testutil.WaitFor(t, "UP after undrain and a passing check", func() bool {
		in := ls()
		return in.Status == string(sd.StatusUp) && in.OutBy == ""
	})
}
