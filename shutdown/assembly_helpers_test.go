package shutdown_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	"github.com/go-kit/kit/metrics"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/internal/assemblytest"
	"github.com/gracekit/gracekit/internal/testutil"
	gkprovider "github.com/gracekit/gracekit/provider" // this package has a provider type
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown/flush"
	"github.com/gracekit/gracekit/zktest"
)

// flushSecret is shared by the assembled providers and gateways below.
var flushSecret = []byte("assembly-flush-secret-0123456789")

// startProvider starts a provider of service, with its own session, that
// serves GET /work: after latency it answers {"instance": id}. Its stop
// flushes flushURLs; it is stopped when the test ends, if it was not.
func startProvider(t *testing.T, zkc *zktest.Cluster, service, id string, latency time.Duration, flushURLs []string) *gkprovider.Provider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := sd.NewSession(zkc.ConnectString(), sd.SessionTimeout(5*time.Second))
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		if latency > 0 {
			tm := time.NewTimer(latency)
			select {
			case <-tm.C:
			case <-r.Context().Done():
				tm.Stop()
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"instance": id})
	})
	p, err := gkprovider.New(sess, gkprovider.Config{
		Instance: sd.Instance{Name: service, ID: id, Address: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port},
		Server:   &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		Listener: ln,
		Flush:    gkprovider.Flush{Secret: flushSecret, Targets: flushURLs},
	})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err) // a failed Start closed the listener and left the session
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	return p
}

// gateway is a consumer that routes one service (GET /work, three
// attempts) and accepts flushes at flushURL.
type gateway struct {
	call       kitendpoint.Endpoint // returns the instance id that answered
	endpointer *endpoint.Endpointer
	flushURL   string
	flushes    atomic.Int64 // acknowledged flushes for the routed service
	notRouted  atomic.Int64 // acknowledged flushes for another service
}

// startGateway starts a gateway of service, with its own session; it is
// stopped when the test ends.
func startGateway(t *testing.T, zkc *zktest.Cluster, service string) *gateway {
	t.Helper()
	f, err := endpoint.NewHTTPFactory(http.MethodGet, "/work",
		func(context.Context, *http.Request, any) error { return nil },
		func(_ context.Context, r *http.Response) (any, error) {
			if r.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("status %d", r.StatusCode)
			}
			var body map[string]string
			err := json.NewDecoder(r.Body).Decode(&body)
			return body["instance"], err
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() }) // after the consumer closed its Endpointer
	sess, err := sd.NewSession(zkc.ConnectString(), sd.SessionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c := assemblytest.StartConsumer(t, sess)
	g := &gateway{}
	if g.call, err = c.Endpoint(context.Background(), service, f.Factory, consumer.WithRetry(endpoint.Attempts(3))); err != nil {
		t.Fatal(err)
	}
	g.endpointer = c.Endpointers(service)[0]
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close) // before the consumer stops
	g.flushURL = srv.URL + "/flush"
	h, err := c.FlushHandler(flushSecret, []string{g.flushURL}, flush.ResultCounter(resultCounter(func(r flush.Result) {
		if r == flush.NotRouted {
			g.notRouted.Add(1)
		} else {
			g.flushes.Add(1)
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/flush", h)
	return g
}

// waitInstances waits until the gateway balances over n instances.
func (g *gateway) waitInstances(t *testing.T, n int) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("gateway balancing over %d instances", n), func() bool {
		return len(g.endpointer.Instances()) == n
	})
}

// resultCounter is a go-kit metrics.Counter for flush.ResultCounter: it
// calls add with the value of the "result" label on every Add.
type resultCounter func(flush.Result)

func (c resultCounter) With(labelValues ...string) metrics.Counter {
	for i := 0; i+1 < len(labelValues); i += 2 {
		if labelValues[i] == "result" {
			r := flush.Result(labelValues[i+1])
			return resultCounter(func(flush.Result) { c(r) })
		}
	}
	return c
}

func (c resultCounter) Add(float64) { c("") }
