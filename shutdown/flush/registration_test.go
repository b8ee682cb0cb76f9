package flush_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown/flush"
	"github.com/gracekit/gracekit/zktest"
)

// zkProvider is a healthy HTTP provider registered in a real ZooKeeper.
type zkProvider struct {
	reg  *sd.Registrar
	inst flush.Self
	addr string // host:port, as the gateway's endpointer knows it
}

func startZKProvider(t *testing.T, client *sd.Client, service, id string) *zkProvider {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, id) }))
	t.Cleanup(srv.Close)
	host, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(p)
	reg, err := sd.NewRegistrar(client, sd.Instance{Name: service, ID: id, Address: host, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.RegisterContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.DeregisterContext(context.Background()) })
	return &zkProvider{reg: reg, inst: flush.Self{Service: service, ID: id, Address: host, Port: port}, addr: srv.Listener.Addr().String()}
}

// zkGateway serves a flush Handler over a real Instancer and Endpointer.
type zkGateway struct {
	url string // the flush URL, its audience
	srv string // where it listens: url, unless restarted with another's
	in  *sd.Instancer
	ep  *endpoint.Endpointer
}

// startZKGateway starts a gateway for service at a new URL, or, when
// audience is not empty, one that answers to audience (a restarted
// gateway keeps its URL).
func startZKGateway(t *testing.T, client *sd.Client, service, audience string) *zkGateway {
	t.Helper()
	in, err := sd.NewInstancer(client, service)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Stop)
	ep, err := endpoint.NewEndpointer(in, func(instance string) (kitendpoint.Endpoint, io.Closer, error) {
		return func(context.Context, any) (any, error) { return instance, nil }, nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ep.Close() })
	srv, base := unstarted(t)
	url := base + "/flush"
	if audience != "" {
		url = audience
	}
	h, err := flush.NewHandler(secret, []string{url},
		flush.EvicterMap(map[string]flush.Evicter{service: flush.DiscoveryEvicter(in, ep)}))
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = h
	srv.Start()
	return &zkGateway{url: url, srv: base + "/flush", in: in, ep: ep}
}

func (g *zkGateway) lists(addr string) bool { return slices.Contains(g.ep.Instances(), addr) }

// result sends req and returns its status and HeaderResult.
func result(t *testing.T, req *http.Request) (int, flush.Result) {
	t.Helper()
	resp := testutil.Do(t, req)
	return resp.StatusCode, flush.Result(resp.Header.Get(flush.HeaderResult))
}

// Issue 8, case 9: a signed flush for a registration the gateway does not
// list is acknowledged with a distinct answer and evicts nothing, even
// when it names a healthy provider's address.
func TestASignedFlushForAnUnlistedRegistrationEvictsNothingAndIsAcknowledged(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t)
	client, err := sd.NewClient(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	p := startZKProvider(t, client, "orders", "orders-1")
	gw := startZKGateway(t, client, "orders", "")
	testutil.WaitFor(t, "the gateway lists the provider", func() bool { return gw.lists(p.addr) })
	czxid := p.reg.Czxid()

	tests := []struct {
		name string
		give flush.Request
		want flush.Result
	}{
		{
			name: "an id the gateway does not list, with the provider's address, is not listed",
			give: flush.Request{Service: "orders", ID: "ghost", Address: p.inst.Address, Port: p.inst.Port, Czxid: czxid},
			want: flush.NotListed,
		},
		{
			name: "the provider's id from another registration is another registration",
			give: request(p.inst, czxid+1, ""),
			want: flush.OtherRegistration,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.give.Target = gw.url
			code, res := result(t, signedFlush(t, gw.url, secret, tt.give, time.Now()))
			if code != http.StatusAccepted || res != tt.want {
				t.Errorf("answer %d %q, want 202 %q", code, res, tt.want)
			}
			if !gw.lists(p.addr) || len(gw.in.Instances()) != 1 {
				t.Errorf("the healthy provider was evicted: endpointer %v, instancer %v", gw.ep.Instances(), gw.in.Instances())
			}
		})
	}

	// A Notifier counts the answer as an acknowledgement.
	ghost := flush.Self{Service: "orders", ID: "ghost", Address: p.inst.Address, Port: p.inst.Port}
	n, err := flush.NewNotifier(ghost, secret, flush.StaticTargets(gw.url), flush.Registration(p.reg.Czxid))
	if err != nil {
		t.Fatal(err)
	}
	reports, err := n.Flush(context.Background())
	if err != nil || !reports[0].Acked || reports[0].Result != flush.NotListed {
		t.Fatalf("Flush = %+v, %v; want acked, not listed", reports, err)
	}
	if !gw.lists(p.addr) {
		t.Fatal("the healthy provider was evicted")
	}

	// The registration itself is evicted.
	n, err = flush.NewNotifier(p.inst, secret, flush.StaticTargets(gw.url), flush.Registration(p.reg.Czxid))
	if err != nil {
		t.Fatal(err)
	}
	if reports, err = n.Flush(context.Background()); err != nil || reports[0].Result != flush.Evicted {
		t.Fatalf("Flush = %+v, %v; want evicted", reports, err)
	}
	if gw.lists(p.addr) {
		t.Fatalf("the flushed registration is still listed: %v", gw.ep.Instances())
	}
}

// Issue 8, case 10: a flush signed for one gateway is refused by another
// (401), which evicts nothing.
func TestAFlushSignedForOneGatewayIsRefusedByAnother(t *testing.T) {
	gw1, ev1 := newGateway(t)
	gw2, ev2 := newGateway(t)
	req := signedRequest(t, gw1.URL, secret, self, time.Now())
	body, _ := io.ReadAll(req.Body)
	if code, _ := result(t, replay(t, gw2.URL, req.Header, body)); code != http.StatusUnauthorized {
		t.Errorf("the other gateway answered %d, want 401", code)
	}
	if code, res := result(t, replay(t, gw1.URL, req.Header, body)); code != http.StatusOK || res != flush.Evicted {
		t.Errorf("the gateway it was meant for answered %d %q, want 200 evicted", code, res)
	}
	if ev1.count() != 1 || ev2.count() != 0 {
		t.Errorf("evictions %d and %d, want 1 and 0", ev1.count(), ev2.count())
	}
	// A target that differs only in form is still this gateway's.
	other := request(self, selfCzxid, gw1.URL+"/elsewhere")
	if code, _ := result(t, signedFlush(t, gw1.URL, secret, other, time.Now())); code != http.StatusUnauthorized {
		t.Errorf("a target on another path answered %d, want 401", code)
	}
}

// replay sends the same bytes again, to url.
func replay(t *testing.T, url string, h http.Header, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h.Clone()
	return req
}

// Issue 8, case 10: the replay of a flush to a restarted gateway (empty
// nonce cache, same URL) cannot evict the provider's new registration.
func TestAReplayedFlushCannotEvictARestartedRegistration(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t)
	client, err := sd.NewClient(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	p := startZKProvider(t, client, "orders", "orders-1")
	gw := startZKGateway(t, client, "orders", "")
	testutil.WaitFor(t, "the gateway lists the provider", func() bool { return gw.lists(p.addr) })

	// The stop: deregister, then flush (the bytes an eavesdropper keeps).
	first := p.reg.Czxid()
	if err := p.reg.DeregisterContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	req := signedFlush(t, gw.url, secret, request(p.inst, first, gw.url), time.Now())
	body, _ := io.ReadAll(req.Body)
	if code, _ := result(t, replay(t, gw.url, req.Header, body)); code/100 != 2 {
		t.Fatalf("the flush answered %d", code)
	}

	// The provider restarts: a new registration of the same id and address.
	if err := p.reg.RegisterContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p.reg.Czxid() == first {
		t.Fatal("the new registration has the old czxid")
	}
	restarted := startZKGateway(t, client, "orders", gw.url)
	testutil.WaitFor(t, "the restarted gateway lists the new registration", func() bool { return restarted.lists(p.addr) })
	testutil.WaitFor(t, "the first gateway lists it again", func() bool { return gw.lists(p.addr) })

	for _, g := range []*zkGateway{restarted, gw} {
		code, res := result(t, replay(t, g.srv, req.Header, body))
		if code == http.StatusOK || res == flush.Evicted {
			t.Errorf("the replay answered %d %q", code, res)
		}
		if !g.lists(p.addr) {
			t.Errorf("the replay evicted the new registration: %v", g.ep.Instances())
		}
	}
}
