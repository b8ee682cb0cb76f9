package flush_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracekit/gracekit/shutdown/flush"
)

var (
	secret = []byte("0123456789abcdef-shared")
	self   = flush.Self{Service: "orders", ID: "orders-1", Address: "10.0.0.7", Port: 8080}
)

// selfCzxid stands in for the creation zxid of self's registration.
const selfCzxid = 0x1000000a7

// registration is the Registration option of notifiers for self.
var registration = flush.Registration(func() int64 { return selfCzxid })

// evictions records what a gateway evicted.
type evictions struct {
	mu   sync.Mutex
	got  []flush.Self
	reqs []flush.Request
	fail error
}

func (e *evictions) Evict(_ context.Context, req flush.Request) (flush.Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fail != nil {
		return "", e.fail
	}
	e.got = append(e.got, flush.Self{Service: req.Service, ID: req.ID, Address: req.Address, Port: req.Port})
	e.reqs = append(e.reqs, req)
	return flush.Evicted, nil
}

func (e *evictions) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.got)
}

// newGateway starts a real HTTP gateway serving a flush Handler for the
// "orders" service, whose audiences are its URL and its URL + "/flush".
func newGateway(t *testing.T, opts ...flush.HandlerOption) (*httptest.Server, *evictions) {
	t.Helper()
	return newGatewayWith(t, nil, opts...)
}

// newGatewayWith is newGateway with more audiences: URLs of proxies in
// front of it, say.
func newGatewayWith(t *testing.T, audiences []string, opts ...flush.HandlerOption) (*httptest.Server, *evictions) {
	t.Helper()
	ev := &evictions{}
	srv, url := unstarted(t)
	h, err := flush.NewHandler(secret, append([]string{url, url + "/flush"}, audiences...),
		flush.EvicterMap(map[string]flush.Evicter{"orders": ev}), opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = h
	srv.Start()
	return srv, ev
}

// unstarted returns a test server that listens but does not serve yet,
// and the URL it will have, so that a flush Handler can be built with it
// as its audience. It is closed when the test ends.
func unstarted(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	t.Cleanup(srv.Close)
	return srv, "http://" + srv.Listener.Addr().String()
}

// request returns the flush request for inst's registration czxid, meant
// for target.
func request(inst flush.Self, czxid int64, target string) flush.Request {
	return flush.Request{Service: inst.Service, ID: inst.ID, Address: inst.Address, Port: inst.Port, Czxid: czxid, Target: target}
}

// signedRequest builds a flush request for inst's registration selfCzxid,
// meant for url, signed with key at ts.
func signedRequest(t *testing.T, url string, key []byte, inst flush.Self, ts time.Time) *http.Request {
	t.Helper()
	return signedFlush(t, url, key, request(inst, selfCzxid, url), ts)
}

// signedFlush builds a flush request with body req, signed with key at ts.
func signedFlush(t *testing.T, url string, key []byte, req flush.Request, ts time.Time) *http.Request {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return signedRaw(t, url, key, body, ts, nextNonce())
}

var nonceSeq atomic.Int64

// nextNonce returns a nonce no other request of this test binary uses.
func nextNonce() string { return "n-" + strconv.FormatInt(nonceSeq.Add(1), 10) }

func signedRaw(t *testing.T, url string, key, body []byte, ts time.Time, nonce string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	sts := strconv.FormatInt(ts.Unix(), 10)
	req.Header.Set(flush.HeaderTimestamp, sts)
	req.Header.Set(flush.HeaderNonce, nonce)
	req.Header.Set(flush.HeaderSignature, flush.Sign(key, sts, nonce, body))
	return req
}
