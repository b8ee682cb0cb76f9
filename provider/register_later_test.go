package provider_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

func helloProvider(t *testing.T, sess *sd.Session, id string, port int, opts ...provider.Option) *provider.Provider {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") })
	p, err := provider.New(sess, provider.Config{
		Instance: sd.Instance{Name: "quote", ID: id, Address: "127.0.0.1", Port: port},
		Server:   &http.Server{Handler: mux, ReadHeaderTimeout: time.Second},
		Addr:     fmt.Sprintf("127.0.0.1:%d", port),
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func status(t *testing.T, url string) int {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// Issue 42: with WithRegisterWhenReachable, a provider that starts while
// every ZooKeeper server is down serves and is ready after
// RegisterReachWait, and registers once ZooKeeper answers.
func TestAProviderStartedInAnOutageRegistersWhenZooKeeperAnswers(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t)
	if err := zkc.StopAll(); err != nil {
		t.Fatal(err)
	}
	sess, err := sd.NewSession(zkc.ConnectString(), sd.SessionTimeout(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	port := testutil.FreePort(t)
	p := helloProvider(t, sess, "late-1", port, provider.WithRegisterWhenReachable())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	begin := time.Now()
	if err := p.Start(ctx); err != nil {
		t.Fatalf("Start in an outage: %v", err)
	}
	if took := time.Since(begin); took > provider.RegisterReachWait+3*time.Second {
		t.Fatalf("Start took %v, want about RegisterReachWait (%v)", took, provider.RegisterReachWait)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	if got := status(t, base+"/hello"); got != http.StatusOK {
		t.Fatalf("/hello: %d", got)
	}
	if got := status(t, base+"/readyz"); got != http.StatusOK {
		t.Fatalf("/readyz: %d", got)
	}
	if err := zkc.StartAll(); err != nil {
		t.Fatal(err)
	}
	conn := testutil.ZKConn(t, zkc.Addrs())
	testutil.WaitFor(t, "the registration once ZooKeeper answered", func() bool {
		ok, _, err := conn.Exists("/services/quote/late-1")
		return err == nil && ok
	})
	sctx, scancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer scancel()
	if err := p.Stop(sctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if ok, _, err := conn.Exists("/services/quote/late-1"); err != nil || ok {
		t.Fatalf("the node after Stop: %v %v, want gone", ok, err)
	}
}

// Issue 42: a provider that never reached ZooKeeper stops in bounded time:
// the background registration ends first, and there is nothing to take
// out of service or delete.
func TestAProviderThatNeverRegisteredStopsCleanly(t *testing.T) {
	t.Parallel()
	sess, err := sd.NewSession(fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)), sd.ConnectTimeout(time.Second)) // nothing listens
	if err != nil {
		t.Fatal(err)
	}
	p := helloProvider(t, sess, "never-1", testutil.FreePort(t), provider.WithRegisterWhenReachable())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	begin := time.Now()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if took := time.Since(begin); took > 8*time.Second {
		t.Fatalf("Stop took %v", took)
	}
	for _, st := range p.Report().Steps {
		if st.Err != nil {
			t.Fatalf("stop step %s: %v", st.Step, st.Err)
		}
	}
}

// Without the option, a Start in an outage fails as before.
func TestWithoutTheOptionAStartInAnOutageFails(t *testing.T) {
	t.Parallel()
	sess, err := sd.NewSession(fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)), sd.ConnectTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p := helloProvider(t, sess, "plain-1", testutil.FreePort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := p.Start(ctx); err == nil {
		_ = p.Stop(ctx)
		t.Fatal("Start succeeded with ZooKeeper down")
	}
	_ = p.Stop(ctx)
}
