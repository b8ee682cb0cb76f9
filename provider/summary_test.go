package provider_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
)

// Issue 39, item 6: a stop ends with one line that sums it up, in the
// words of the step lines before it (shutdown's Step* names): every stop
// step in the order it ran with its time, the whole stop's time and the
// count of failed steps, at info when none failed; at warn, naming them,
// when one did.
func TestAStopEndsWithOneSummaryLineInTheStepLinesWords(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	for _, tt := range []struct {
		name      string
		flushURLs []string // a target that refuses: the flush step fails
		wantLevel slog.Level
		wantFail  string
	}{
		{name: "a clean stop", wantLevel: slog.LevelInfo},
		{name: "a stop whose flush failed", flushURLs: []string{"http://" + refusedAddr(t) + "/flush"}, wantLevel: slog.LevelWarn, wantFail: shutdown.StepFlush},
	} {
		t.Run(tt.name, func(t *testing.T) {
			logs, log := testutil.NewLogs()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			sess, err := sd.NewSession(zkc.ConnectString())
			if err != nil {
				t.Fatal(err)
			}
			p, err := provider.New(sess, provider.Config{
				Instance:     sd.Instance{Name: "quote", Address: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port},
				Server:       &http.Server{ReadHeaderTimeout: 5 * time.Second},
				Listener:     ln,
				Flush:        provider.Flush{Secret: secret, Targets: tt.flushURLs},
				QuietWindow:  50 * time.Millisecond,
				MaxQuiesce:   100 * time.Millisecond,
				FlushTimeout: 500 * time.Millisecond,
			}, zkc.registrar(), provider.WithLogger(log))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := p.Start(ctx); err != nil {
				t.Fatal(err)
			}
			stopErr := p.Stop(ctx)
			if (stopErr != nil) != (tt.wantFail != "") {
				t.Fatalf("Stop: %v", stopErr)
			}

			var stepped []string // the step lines' names, stop phase, in order
			for _, l := range logs.All(slog.LevelDebug) {
				if strings.HasPrefix(l.Message, "lifecycle step") && l.Attrs["phase"] == "stop" {
					stepped = append(stepped, l.Attrs["step"])
				}
			}
			sums := logs.Messages("stop done")
			if len(sums) != 1 {
				t.Fatalf("%d summary lines, want one:\n%s", len(sums), logs)
			}
			sum := sums[0]
			var named []string
			for _, f := range strings.Fields(sum.Attrs["steps"]) {
				name, d, _ := strings.Cut(f, "=")
				if _, err := time.ParseDuration(d); err != nil && d != "skipped" {
					t.Errorf("step %s's time %q is no duration", name, d)
				}
				named = append(named, name)
			}
			if strings.Join(named, ",") != strings.Join(stepped, ",") || len(named) < 7 {
				t.Errorf("the summary names steps %v, the step lines %v: want the same, in the order they ran", named, stepped)
			}
			if d, err := time.ParseDuration(sum.Attrs["duration"]); err != nil || d <= 0 {
				t.Errorf("duration=%q, want the stop's time", sum.Attrs["duration"])
			}
			if sum.Level != tt.wantLevel || sum.Attrs["failed"] != tt.wantFail || (tt.wantFail == "") != (sum.Attrs["errors"] == "0") {
				t.Errorf("summary at %s with errors=%s failed=%q; want %s, failed=%q", sum.Level, sum.Attrs["errors"], sum.Attrs["failed"], tt.wantLevel, tt.wantFail)
			}
			if last := logs.All(slog.LevelDebug); last[len(last)-1].Message != "stop done" {
				t.Errorf("the summary is not the stop's last line:\n%s", logs)
			}
		})
	}
}

// refusedAddr is a loopback address nothing listens on.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
