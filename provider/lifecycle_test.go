package provider_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/lifecycle"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
)

// newBare builds a provider of service "life" over its own session; cfg's
// Instance and Server are filled in when empty.
func newBare(t *testing.T, zkc *zkEnv, id string, cfg provider.Config) (*provider.Provider, *sd.Session) {
	t.Helper()
	sess, err := sd.NewSession(zkc.ConnectString(), sd.SessionTimeout(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Instance.Name == "" {
		cfg.Instance = sd.Instance{Name: "life", ID: id, Address: "127.0.0.1", Port: 1}
	}
	if cfg.Server == nil {
		cfg.Server = &http.Server{ReadHeaderTimeout: time.Second}
	}
	if cfg.Listener == nil && cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	p, err := provider.New(sess, cfg, zkc.registrar())
	if err != nil {
		t.Fatal(err)
	}
	return p, sess
}

// nodeStaysGone fails unless the znode at path is absent now and for the
// next 2 s: a keeper that resurrects nodes does so within a second.
func nodeStaysGone(t *testing.T, conn testutil.ZK, path string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		ok, _, err := conn.Exists(path)
		if err != nil {
			t.Fatalf("exists %s: %v", path, err)
		}
		if ok {
			t.Fatalf("%s exists after the last Stop", path)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sessionClosed(t *testing.T, sess *sd.Session) {
	t.Helper()
	testutil.WaitFor(t, "the session closed", func() bool { return sess.State() == lifecycle.StateStopped })
	if _, err := sess.Client(); !errors.Is(err, sd.ErrClosed) {
		t.Fatalf("the session after the last Stop: %v, want sd.ErrClosed", err)
	}
}

// Issue 13, case 1: a second Start changes nothing, and the node does not
// come back after Stop.
func TestASecondStartDoesNotResurrectTheNodeAfterStop(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	conn := testutil.ZKConn(t, zkc.Addrs())
	p, sess := newBare(t, zkc, "twice", provider.Config{})
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); !errors.Is(err, lifecycle.ErrStarted) {
		t.Fatalf("second Start: %v, want lifecycle.ErrStarted", err)
	}
	if p.State() != lifecycle.StateStarted {
		t.Fatalf("state after a second Start: %s, want started", p.State())
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop after a second Start: %v", err)
	}
	if err := p.Start(ctx); !errors.Is(err, lifecycle.ErrStopped) {
		t.Fatalf("Start after Stop: %v, want lifecycle.ErrStopped", err)
	}
	nodeStaysGone(t, conn, zkc.path("life", "twice"))
	sessionClosed(t, sess)
}

// Issue 13, case 2: a Start that failed (port in use) can be retried once
// the port is free, and no try leaves a session share behind.
func TestAFailedStartCanBeRetriedAndLeaksNoShare(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	conn := testutil.ZKConn(t, zkc.Addrs())
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := busy.Addr().String()
	port := busy.Addr().(*net.TCPAddr).Port
	p, sess := newBare(t, zkc, "retry", provider.Config{
		Instance: sd.Instance{Name: "life", ID: "retry", Address: "127.0.0.1", Port: port},
		Addr:     addr,
	})
	ctx := context.Background()
	for i := range 2 {
		if err := p.Start(ctx); err == nil {
			t.Fatalf("Start %d succeeded on a port in use", i)
		}
		if p.State() != lifecycle.StateFailed {
			t.Fatalf("state after a failed Start: %s, want failed", p.State())
		}
		if st := sess.State(); st == lifecycle.StateStarted {
			t.Fatalf("a failed Start left the session %s: a share leaked", st)
		}
	}
	_ = busy.Close()
	if err := p.Start(ctx); err != nil {
		t.Fatalf("retry after the port was freed: %v", err)
	}
	if ok, _, err := conn.Exists(zkc.path("life", "retry")); err != nil || !ok {
		t.Fatalf("registered after the retry: %v, %v", ok, err)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	nodeStaysGone(t, conn, zkc.path("life", "retry"))
	sessionClosed(t, sess)
}

// Issue 13, case 3: a Start with a done ctx (a SIGTERM during start-up)
// changes nothing, also when another role connected the session already;
// the Stop after it closes the given listener.
func TestStartWithADoneCtxLeaksNeitherShareNorListener(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, sess := newBare(t, zkc, "sigterm", provider.Config{Listener: ln})
	c, err := consumer.New(sess)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Start(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with a cancelled ctx: %v, want context.Canceled", err)
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	sessionClosed(t, sess) // the provider took no share the consumer's Stop left open
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		_ = c.Close()
		t.Fatal("the given listener still accepts connections after Stop")
	}
	if err := p.Start(context.Background()); !errors.Is(err, lifecycle.ErrStopped) {
		t.Fatalf("Start after Stop: %v, want lifecycle.ErrStopped", err)
	}
}

// A Stop during Start cancels it, and what the start did is undone.
func TestAStopDuringStartCancelsIt(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	conn := testutil.ZKConn(t, zkc.Addrs())
	release := make(chan struct{})
	p, sess := newBare(t, zkc, "slow", provider.Config{ReadyCheck: func(ctx context.Context) error {
		close(release)
		<-ctx.Done()
		return ctx.Err()
	}})
	started := make(chan error, 1)
	go func() { started <- p.Start(context.Background()) }()
	<-release
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop during Start: %v", err)
	}
	if err := <-started; err == nil {
		t.Fatal("Start succeeded although Stop cancelled it")
	}
	nodeStaysGone(t, conn, zkc.path("life", "slow"))
	sessionClosed(t, sess)
}

// Issue 13, case 7: the user's handler sees every path exactly as the
// server received it; only the probe paths are the provider's.
func TestTheUserHandlerSeesUncleanPathsUnchanged(t *testing.T) {
	sess, err := sd.NewSession("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 1)
	user := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Method + " " + r.URL.Path
		_, _ = io.WriteString(w, "user")
	})
	srv := &http.Server{Handler: user, ReadHeaderTimeout: time.Second}
	if _, err := provider.New(sess, provider.Config{Instance: sd.Instance{Name: "q", Address: "127.0.0.1", Port: 1}, Server: srv}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	base := "http://" + ln.Addr().String()
	for _, path := range []string{"/objects/a//b", "/x/../y", "/./z", "/readyz/extra"} {
		resp, err := client.Post(base+path, "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("POST %s: %d, want the user's 200", path, resp.StatusCode)
			continue
		}
		if got := <-seen; got != "POST "+path {
			t.Errorf("the user's handler saw %q, want %q", got, "POST "+path)
		}
	}
	resp, err := client.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz before Start: %d, want 503", resp.StatusCode)
	}
}

// Issue 13, case 5: an Address that no consumer could dial is refused.
func TestAnAddressWithAPortOrSchemeIsRefused(t *testing.T) {
	sess, err := sd.NewSession("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"10.0.0.7:8080", "http://10.0.0.7", "10.0.0.7 ", "[::1]", "a b"} {
		_, err := provider.New(sess, provider.Config{Instance: sd.Instance{Name: "q", Address: addr, Port: 8080}, Server: &http.Server{ReadHeaderTimeout: time.Second}})
		if err == nil {
			t.Errorf("Address %q accepted", addr)
		}
	}
	for _, addr := range []string{"10.0.0.7", "::1", "quote-1.svc.cluster.local"} {
		if _, err := provider.New(sess, provider.Config{Instance: sd.Instance{Name: "q", Address: addr, Port: 8080}, Server: &http.Server{ReadHeaderTimeout: time.Second}}); err != nil {
			t.Errorf("Address %q refused: %v", addr, err)
		}
	}
}

// A Start that failed after serving (the ready check) shut its server
// down, which net/http never serves again: a retry says so and changes
// nothing, rather than registering an instance nothing serves.
func TestARetryAfterTheServerWasShutDownIsRefused(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	conn := testutil.ZKConn(t, zkc.Addrs())
	var fail atomic.Bool
	fail.Store(true)
	p, sess := newBare(t, zkc, "shut", provider.Config{ReadyCheck: func(context.Context) error {
		if fail.Load() {
			return errors.New("the database is down")
		}
		return nil
	}})
	ctx := context.Background()
	if err := p.Start(ctx); err == nil {
		t.Fatal("Start succeeded although the ready check failed")
	}
	fail.Store(false)
	if err := p.Start(ctx); !errors.Is(err, provider.ErrServerShutDown) {
		t.Fatalf("retry: %v, want provider.ErrServerShutDown", err)
	}
	if ok, _, _ := conn.Exists(zkc.path("life", "shut")); ok {
		t.Fatal("registered by a refused retry")
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := sess.State(); st == lifecycle.StateStarted {
		t.Fatalf("the session after Stop: %s", st)
	}
}
