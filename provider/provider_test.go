package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(zktest.SharedMain(m)) }

// zkEnv is a ZooKeeper server and the base path a test's nodes go under.
type zkEnv struct {
	*zktest.Cluster
	base string
}

// sharedZK is the test binary's shared server, with a base path no other
// test uses: tests on it never see each other's instances.
func sharedZK(t *testing.T) *zkEnv { return &zkEnv{zktest.Shared(t), zktest.UniquePath(t)} }

// ownZK is a server of the test's own, at sd's default base path, for a
// test that expires its sessions or drains through the CLI's defaults.
func ownZK(t *testing.T) *zkEnv { return &zkEnv{zktest.New(t), "/services"} }

// path is the znode of instance id of service under the base path.
func (z *zkEnv) path(service, id string) string { return z.base + "/" + service + "/" + id }

// registrar makes a provider register under the base path.
func (z *zkEnv) registrar() provider.Option {
	return provider.WithRegistrarOptions(sd.BasePath(z.base))
}

// instancers makes a consumer read under the base path.
func (z *zkEnv) instancers() consumer.Option {
	return consumer.WithInstancerOptions(sd.BasePath(z.base))
}

// startRole starts p or c and stops it (within 10 s) when the test ends.
func startRole(t *testing.T, role interface {
	Start(context.Context) error
	Stop(context.Context) error
}) {
	t.Helper()
	if err := role.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = role.Stop(ctx)
	})
}

var secret = []byte("provider-test-secret-0123456789")

// startProvider serves GET /work, answering its instance id after latency.
func startProvider(t *testing.T, zkc *zkEnv, id string, flushURLs []string) *provider.Provider {
	t.Helper()
	return startProviderWith(t, zkc, id, flushURLs, 5*time.Millisecond, nil, provider.HealthCheck{})
}

// startProviderWith is startProvider with the work of a request, a hook
// called for each one served (nil for none), and a health check.
func startProviderWith(t *testing.T, zkc *zkEnv, id string, flushURLs []string, work time.Duration, onServe func(), health provider.HealthCheck) *provider.Provider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := sd.NewSession(zkc.ConnectString(), sd.SessionTimeout(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/work", func(w http.ResponseWriter, _ *http.Request) {
		if onServe != nil {
			onServe()
		}
		time.Sleep(work)
		_, _ = io.WriteString(w, id)
	})
	p, err := provider.New(sess, provider.Config{
		Instance:    sd.Instance{Name: "quote", ID: id, Address: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port},
		Server:      &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		Listener:    ln,
		Flush:       provider.Flush{Secret: secret, Targets: flushURLs},
		QuietWindow: 100 * time.Millisecond,
		Health:      health,
	}, zkc.registrar())
	if err != nil {
		t.Fatal(err)
	}
	startRole(t, p)
	return p
}

type gateway struct {
	call func(ctx context.Context) (string, error)
	url  string
}

// startGateway routes "quote" and accepts flushes at <server>/flush.
func startGateway(t *testing.T, zkc *zkEnv) *gateway {
	t.Helper()
	sess, err := sd.NewSession(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(sess, zkc.instancers())
	if err != nil {
		t.Fatal(err)
	}
	startRole(t, c)
	f, err := endpoint.NewHTTPFactory(http.MethodGet, "/work",
		func(context.Context, *http.Request, any) error { return nil },
		func(_ context.Context, r *http.Response) (any, error) {
			b, err := io.ReadAll(r.Body)
			if r.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("status %d", r.StatusCode)
			}
			return string(b), err
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	ep, err := c.Endpoint(context.Background(), "quote", f.Factory)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	g := &gateway{url: srv.URL + "/flush"}
	h, err := c.FlushHandler(secret, []string{g.url})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/flush", h)
	g.call = func(ctx context.Context) (string, error) {
		resp, err := ep(ctx, nil)
		if err != nil {
			return "", err
		}
		return resp.(string), nil
	}
	return g
}

// A provider stopped under steady load through a gracekit gateway fails
// no request; its flush is acknowledged and it quiesced.
func TestAProviderStoppedUnderLoadFailsNoRequest(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	gw := startGateway(t, zkc)
	p1 := startProvider(t, zkc, "p1", []string{gw.url})
	startProvider(t, zkc, "p2", []string{gw.url})

	load := testutil.StartLoad(6, gw.call)
	defer load.Stop()
	testutil.WaitFor(t, "both providers serving", func() bool { return load.Served("p1") > 10 && load.Served("p2") > 10 })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	err := p1.Stop(ctx)
	cancel()
	load.Stop()
	if err != nil {
		t.Errorf("Stop: %v", err)
	}
	r := p1.Report()
	if len(r.Flush) != 1 || !r.Flush[0].Acked {
		t.Errorf("flush report %+v, want one acknowledged target", r.Flush)
	}
	if n := load.Failed(); n != 0 {
		t.Fatalf("%d requests failed; first: %v", n, load.FirstErr())
	}
}

// New does no I/O: an unreachable ensemble shows at Start, with a clear
// error, and nothing is left running.
func TestNewDoesNoIOAndStartSaysWhatFailed(t *testing.T) {
	port := testutil.FreePort(t) // nothing listens there
	sess, err := sd.NewSession("127.0.0.1:"+strconv.Itoa(port), sd.ConnectTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	p, err := provider.New(sess, provider.Config{
		Instance: sd.Instance{Name: "quote", Address: "127.0.0.1", Port: 1},
		Server:   &http.Server{ReadHeaderTimeout: time.Second},
	})
	if err != nil {
		t.Fatalf("New did I/O or refused a good config: %v", err)
	}
	err = p.Start(context.Background())
	if err == nil {
		t.Fatal("Start succeeded without ZooKeeper")
	}
	t.Logf("Start: %v", err)
	if err := p.Stop(context.Background()); err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("Stop after a failed Start: %v", err)
	}
}

// A process that both serves and calls shares one session: the consumer
// keeps working after the provider stopped, and the last one closes it.
func TestProviderAndConsumerShareOneSession(t *testing.T) {
	t.Parallel()
	zkc := sharedZK(t)
	sess, err := sd.NewSession(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(sess, zkc.instancers())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	p, err := provider.New(sess, provider.Config{
		Instance: sd.Instance{Name: "both", ID: "b1", Address: "127.0.0.1", Port: testutil.FreePort(t)},
		Server:   &http.Server{Addr: "127.0.0.1:0", ReadHeaderTimeout: time.Second},
	}, zkc.registrar())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	in, err := c.Instancer(context.Background(), "both")
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the provider listed", func() bool { return len(in.Instances()) == 1 })
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the provider gone", func() bool { return len(in.Instances()) == 0 })
	client, err := sess.Client()
	if err != nil || !client.Connected() {
		t.Fatalf("the session closed with the provider while the consumer uses it: %v", err)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Client(); !errors.Is(err, sd.ErrClosed) {
		t.Fatalf("after the last role stopped: %v, want sd.ErrClosed", err)
	}
}

var _ = json.Marshal
