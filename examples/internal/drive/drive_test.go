package drive

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestChildEnv(t *testing.T) {
	base := []string{"PATH=/bin", "GRACEKIT_PORT=1", "PROVIDER_LATENCY=1s", "GATEWAY_UPSTREAM=x", "HOME=/h"}
	got := ChildEnv(base, map[string]string{"GRACEKIT_SERVICE": "quote", "HOME": "/other"})
	want := []string{"PATH=/bin", "GRACEKIT_SERVICE=quote", "HOME=/other"}
	if !slices.Equal(got, want) {
		t.Errorf("ChildEnv = %v, want %v", got, want)
	}
}

// Moved from examples/chaos.
func TestChildEnvReplacesTheDriversVariables(t *testing.T) {
	got := ChildEnv([]string{"PATH=/bin", "GRACEKIT_ZK_SERVERS=elsewhere", "PROVIDER_LATENCY=1s", "HOME=/h"},
		map[string]string{"GRACEKIT_PORT": "1", "GRACEKIT_ZK_SERVERS": "127.0.0.1:2"})
	want := []string{"PATH=/bin", "HOME=/h", "GRACEKIT_PORT=1", "GRACEKIT_ZK_SERVERS=127.0.0.1:2"}
	if !slices.Equal(got, want) {
		t.Errorf("ChildEnv = %v, want %v", got, want)
	}
}

// Moved from examples/rollout.
func TestChildEnvSetsTheRunsBasePath(t *testing.T) {
	base := []string{"PATH=/bin", "GRACEKIT_BASE_PATH=/services", "GATEWAY_LOOPBACK_ONLY=0"}
	env := ChildEnv(base, map[string]string{"GRACEKIT_BASE_PATH": "/gracekit-demo-ab", "GATEWAY_LOOPBACK_ONLY": "1"})
	got := strings.Join(env, " ")
	if want := "PATH=/bin GATEWAY_LOOPBACK_ONLY=1 GRACEKIT_BASE_PATH=/gracekit-demo-ab"; got != want {
		t.Errorf("ChildEnv = %s, want %s", got, want)
	}
}

func TestIsPostIsOneInFive(t *testing.T) {
	n := 0
	for i := int64(1); i <= 5000; i++ {
		if IsPost(i) {
			n++
		}
	}
	if n != 1000 {
		t.Errorf("%d POSTs in 5000, want 1000", n)
	}
}

func TestInstanceOf(t *testing.T) {
	if got := InstanceOf([]byte(`{"symbol":"ABC","price":12.34,"instance":"quote-1"}`)); got != "quote-1" {
		t.Errorf("InstanceOf = %q", got)
	}
	if got := InstanceOf([]byte(`not json`)); got != "" {
		t.Errorf("InstanceOf(not json) = %q", got)
	}
}

func TestErrorAndUpstreamOf(t *testing.T) {
	body := []byte(`{"error":"upstream gone","upstream":"127.0.0.1:9"}`)
	if got := ErrorOf(body); got != "upstream gone" {
		t.Errorf("ErrorOf = %q", got)
	}
	if got := ErrorOf([]byte("bad gateway")); got != "bad gateway" {
		t.Errorf("ErrorOf(text) = %q", got)
	}
	if got := UpstreamOf(body); got != "127.0.0.1:9" {
		t.Errorf("UpstreamOf = %q", got)
	}
}

func TestShorten(t *testing.T) {
	tests := []struct {
		give string
		n    int
		want string
	}{
		{give: "a  b\n c", n: 10, want: "a b c"},
		{give: "abcdef", n: 3, want: "abc…"},
	}
	for _, tt := range tests {
		if got := Shorten(tt.give, tt.n); got != tt.want {
			t.Errorf("Shorten(%q, %d) = %q, want %q", tt.give, tt.n, got, tt.want)
		}
	}
}

func TestNewRequestSendsAKeyOnlyWithAPost(t *testing.T) {
	req, err := NewRequest(context.Background(), "http://127.0.0.1:1", 5, "ABC", "run-5")
	if err != nil {
		t.Fatal(err)
	}
	if req.Method != "POST" || req.URL.Path != "/api/orders" || req.Header.Get(HeaderIdempotencyKey) != "run-5" {
		t.Errorf("POST = %s %s key %q", req.Method, req.URL, req.Header.Get(HeaderIdempotencyKey))
	}
	req, err = NewRequest(context.Background(), "http://127.0.0.1:1", 4, "ABC", "")
	if err != nil {
		t.Fatal(err)
	}
	if req.Method != "GET" || req.URL.String() != "http://127.0.0.1:1/api/quote?symbol=ABC" || req.Header.Get(HeaderIdempotencyKey) != "" {
		t.Errorf("GET = %s %s", req.Method, req.URL)
	}
}

func TestReadLedgers(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "quote-1.run1.keys")
	b := filepath.Join(dir, "quote-2.run1.keys")
	if err := os.WriteFile(a, []byte("k1\nk2\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("k2\r\nk3"), 0o644); err != nil {
		t.Fatal(err)
	}
	lg, err := ReadLedgers(a, b, filepath.Join(dir, "missing.keys"))
	if err != nil {
		t.Fatal(err)
	}
	if lg.Files != 2 || lg.Lines != 4 || !slices.Equal(lg.Execs["k2"], []string{"quote-1.run1", "quote-2.run1"}) || len(lg.Execs) != 3 {
		t.Errorf("ReadLedgers = %+v", lg)
	}
}

func TestRankReasons(t *testing.T) {
	got := RankReasons(map[string]int{"b": 2, "a": 2, "c": 5})
	want := []ReasonCount{{"c", 5}, {"a", 2}, {"b", 2}}
	if !slices.Equal(got, want) {
		t.Errorf("RankReasons = %v, want %v", got, want)
	}
}

func TestSupervisorStopsAndKills(t *testing.T) {
	dir := t.TempDir()
	s := NewSupervisor()
	defer s.KillAll()
	polite, err := s.Start("polite", "/bin/sh", []string{"-c", "echo up; exec sleep 30"}, nil, filepath.Join(dir, "polite.log"))
	if err != nil {
		t.Fatal(err)
	}
	stubborn, err := s.Start("stubborn", "/bin/sh", []string{"-c", "trap '' TERM; echo up; while :; do sleep 1; done"}, nil, filepath.Join(dir, "stubborn.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Proc{polite, stubborn} { // the trap must be set before the SIGTERM
		for deadline := time.Now().Add(5 * time.Second); !strings.Contains(Tail(p.LogPath(), 1), "up"); {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not start: %s", p.Name(), Tail(p.LogPath(), 5))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if killed := polite.Stop(syscall.SIGTERM, 5*time.Second); killed || polite.ExitString() != "SIGTERM" {
		t.Errorf("polite: killed %v, exit %s; want a SIGTERM exit", killed, polite.ExitString())
	}
	if killed := stubborn.Stop(syscall.SIGTERM, 200*time.Millisecond); !killed || stubborn.ExitString() != "SIGKILL" {
		t.Errorf("stubborn: killed %v, exit %s; want killed", killed, stubborn.ExitString())
	}
	if stubborn.ExitedAt().IsZero() || !stubborn.Exited() {
		t.Error("stubborn: no exit time after Stop")
	}
	s.KillAll()
	if _, err := s.Start("late", "/bin/true", nil, nil, filepath.Join(dir, "late.log")); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after KillAll: %v, want ErrClosed", err)
	}
}
