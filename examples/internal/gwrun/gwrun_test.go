package gwrun

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLoopbackOnly(t *testing.T) {
	tests := []struct {
		give    string
		want    bool
		wantErr bool
	}{
		{give: "", want: false},
		{give: "0", want: false},
		{give: "1", want: true},
		{give: "yes", wantErr: true},
	}
	for _, tt := range tests {
		t.Setenv("GATEWAY_LOOPBACK_ONLY", tt.give)
		got, err := LoopbackOnly()
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("LoopbackOnly(%q) = %v, %v; want %v, error %v", tt.give, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{"127.0.0.1": true, "127.8.0.1": true, "::1": true, "::ffff:127.0.0.1": true,
		"10.0.0.1": false, "localhost": false, "": false} {
		if got := IsLoopback(host); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestWaitShutsDownOnTheFirstSignal(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })}
	s, err := Listen(srv, 0)
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	sigs <- syscall.SIGTERM
	done := make(chan error, 1)
	go func() { done <- s.Wait(sigs, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Wait = %v, want nil", err)
		}
	case <-time.After(ShutdownTimeout + time.Second):
		t.Fatal("Wait did not return")
	}
}
