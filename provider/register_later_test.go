package provider_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/consumer"
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

// lockedBuffer is a log sink the provider's goroutines write to while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Issue 42: a provider that flushes the gateways it discovers
// (Flush.Gateways) starts in an outage too: its watch of the gateways'
// service waits for ZooKeeper in the background, as its registration
// does, and once both are done its stop flushes a gateway registered
// after the outage. Before, the Start failed when the watch's first load
// found no server.
func TestAProviderFlushingDiscoveredGatewaysStartsInAnOutage(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t)
	if err := zkc.StopAll(); err != nil {
		t.Fatal(err)
	}
	sess, err := sd.NewSession(zkc.ConnectString(), sd.SessionTimeout(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	cons, err := consumer.New(sess, consumer.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cons.Start(ctx); err != nil {
		t.Fatalf("consumer Start in an outage: %v", err)
	}
	t.Cleanup(func() { _ = cons.Stop(context.Background()) })

	var flushes atomic.Int64
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/flush" {
			flushes.Add(1)
		}
	}))
	t.Cleanup(gw.Close)
	port := testutil.FreePort(t)
	mux := http.NewServeMux()
	p, err := provider.New(sess, provider.Config{
		Instance: sd.Instance{Name: "quote", ID: "late-gw", Address: "127.0.0.1", Port: port},
		Server:   &http.Server{Handler: mux, ReadHeaderTimeout: time.Second},
		Addr:     fmt.Sprintf("127.0.0.1:%d", port),
		Flush:    provider.Flush{Secret: bytes.Repeat([]byte("s"), 32), Gateways: []string{"edge"}},
	}, provider.WithConsumer(cons), provider.WithRegisterWhenReachable(), provider.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := p.Start(ctx); err != nil {
		t.Fatalf("Start in an outage: %v", err)
	}
	// Each of the two waits gives up after RegisterReachWait at most.
	if took := time.Since(begin); took > 2*provider.RegisterReachWait+3*time.Second {
		t.Fatalf("Start took %v, want at most twice RegisterReachWait (%v)", took, provider.RegisterReachWait)
	}
	if got := status(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", port)); got != http.StatusOK {
		t.Fatalf("/readyz: %d", got)
	}

	if err := zkc.StartAll(); err != nil {
		t.Fatal(err)
	}
	conn := testutil.ZKConn(t, zkc.Addrs())
	gwURL, err := url.Parse(gw.URL)
	if err != nil {
		t.Fatal(err)
	}
	gwPort, err := strconv.Atoi(gwURL.Port())
	if err != nil {
		t.Fatal(err)
	}
	edge := sd.Instance{Name: "edge", ID: "edge-1", Address: "127.0.0.1", Port: gwPort, Metadata: map[string]string{sd.MetadataFlushPath: "/flush"}}
	data, err := sd.CuratorCodec{}.Encode(edge)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Create("/services", nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	if _, err := conn.Create("/services/edge", nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	if _, err := conn.Create("/services/edge/edge-1", data, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	// The log, not the node: the node exists a moment before the
	// Registrar has the create's reply (a stop then would find it not yet
	// registered, and flush nobody).
	testutil.WaitFor(t, "the registration and the gateways' watch once ZooKeeper answered", func() bool {
		l := logs.String()
		return strings.Contains(l, "registered once ZooKeeper answered") && strings.Contains(l, "watching the flush gateways once ZooKeeper answered")
	})
	testutil.WaitFor(t, "edge-1 listed", func() bool {
		in, err := cons.Instancer(ctx, "edge")
		return err == nil && len(in.Instances()) == 1
	})
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if flushes.Load() == 0 {
		t.Fatalf("the stop flushed no gateway; log:\n%s", logs.String())
	}
}

// Issue 42: a provider that never reached ZooKeeper flushes nobody at its
// stop, and its stop has no error: no gateway could list it, and a flush
// would have no registration to name (before, the stop failed with
// flush.ErrNoRegistration for each signed target).
func TestAProviderThatNeverRegisteredFlushesNobody(t *testing.T) {
	t.Parallel()
	var flushes atomic.Int64
	gw := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { flushes.Add(1) }))
	t.Cleanup(gw.Close)
	sess, err := sd.NewSession(fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)), sd.ConnectTimeout(time.Second)) // nothing listens
	if err != nil {
		t.Fatal(err)
	}
	port := testutil.FreePort(t)
	p, err := provider.New(sess, provider.Config{
		Instance: sd.Instance{Name: "quote", ID: "never-2", Address: "127.0.0.1", Port: port},
		Server:   &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second},
		Addr:     fmt.Sprintf("127.0.0.1:%d", port),
		Flush:    provider.Flush{Secret: bytes.Repeat([]byte("s"), 32), Targets: []string{gw.URL + "/flush"}},
	}, provider.WithRegisterWhenReachable())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if n := flushes.Load(); n != 0 {
		t.Fatalf("the stop sent %d flushes for an instance that never registered", n)
	}
}
