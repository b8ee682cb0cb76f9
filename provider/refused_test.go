package provider_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
)

var refusedInst = sd.Instance{Name: "quote", ID: "p1", Address: "127.0.0.1", Port: 8080}

func idleSession(t *testing.T) *sd.Session {
	t.Helper()
	sess, err := sd.NewSession("127.0.0.1:2181") // never started: no I/O
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

// Issue 22: New refuses a base path that path.Clean changes (an
// *sd.ConfigError, as sd.NewRegistrar would at Start), before any I/O.
func TestNewRefusesAnUncleanBasePath(t *testing.T) {
	sess, inst := idleSession(t), refusedInst
	for _, bp := range []string{"/services//quote", "/a/./b"} {
		_, err := provider.New(sess, provider.Config{Instance: inst, Server: &http.Server{ReadHeaderTimeout: time.Second}},
			provider.WithRegistrarOptions(sd.BasePath(bp)))
		var ce *sd.ConfigError
		if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "provider: ") {
			t.Fatalf("base path %q: New error %v, want a provider error over an *sd.ConfigError", bp, err)
		}
	}
}

// Issue 22: New refuses a Server and GRPC on one port, rather than Start
// failing with "address already in use".
func TestNewRefusesOnePortForTwoServers(t *testing.T) {
	sess, inst := idleSession(t), refusedInst
	tracker := new(shutdown.Tracker)
	gs := grpc.NewServer()
	_, err := provider.New(sess, provider.Config{Instance: inst, Server: &http.Server{Addr: ":8080", ReadHeaderTimeout: time.Second},
		GRPC: gs, GRPCAddr: ":8080", Tracker: tracker})
	if err == nil || !strings.Contains(err.Error(), "GRPCAddr") {
		t.Fatalf("New with one port for both servers: %v, want an error naming GRPCAddr", err)
	}
}
