package shutdown_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
)

var (
	secret = []byte("0123456789abcdef-shared")
	self   = shutdown.Instance{Service: "orders", ID: "orders-1", Address: "10.0.0.7", Port: 8080}
)

// selfCzxid stands in for the creation zxid of self's registration.
const selfCzxid = 0x1000000a7

// registration is the Registration option of notifiers for self.
var registration = shutdown.Registration(func() int64 { return selfCzxid })

// errNoNode is what the real registrar returns when its node is gone.
var errNoNode = errors.New("zk: node does not exist")

// fakeRegistrar stands in for sd.Registrar. Like the real one it honors
// ctx, fails once its node is deleted, and can be told to fail or hang.
type fakeRegistrar struct {
	mu         sync.Mutex
	calls      []string
	registered bool
	fail       map[string]error // method → error to return
	hang       map[string]bool  // method → wait for ctx
}

func (f *fakeRegistrar) call(ctx context.Context, name string) error {
	f.mu.Lock()
	f.calls = append(f.calls, name)
	err, hang := f.fail[name], f.hang[name]
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}

func (f *fakeRegistrar) RegisterContext(ctx context.Context) error {
	if err := f.call(ctx, "register"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registered = true
	return nil
}

func (f *fakeRegistrar) SetStatus(ctx context.Context, s sd.Status) error {
	if err := f.call(ctx, "status "+string(s)); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.registered {
		return errNoNode
	}
	return nil
}

func (f *fakeRegistrar) DeregisterContext(ctx context.Context) error {
	if err := f.call(ctx, "deregister"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.registered {
		return errNoNode
	}
	f.registered = false
	return nil
}

func (f *fakeRegistrar) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// evictions records what a gateway evicted.
type evictions struct {
	mu   sync.Mutex
	got  []shutdown.Instance
	reqs []shutdown.FlushRequest
	fail error
}

func (e *evictions) Evict(_ context.Context, req shutdown.FlushRequest) (shutdown.Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fail != nil {
		return "", e.fail
	}
	e.got = append(e.got, req.Instance)
	e.reqs = append(e.reqs, req)
	return shutdown.Evicted, nil
}

func (e *evictions) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.got)
}

// newGateway starts a real HTTP gateway serving a flush Handler for the
// "orders" service, whose audiences are its URL and its URL + "/flush".
func newGateway(t *testing.T, opts ...shutdown.Option) (*httptest.Server, *evictions) {
	t.Helper()
	return newGatewayWith(t, nil, opts...)
}

// newGatewayWith is newGateway with more audiences: URLs of proxies in
// front of it, say.
func newGatewayWith(t *testing.T, audiences []string, opts ...shutdown.Option) (*httptest.Server, *evictions) {
	t.Helper()
	ev := &evictions{}
	srv, url := unstarted(t)
	h, err := shutdown.NewHandler(secret, append([]string{url, url + "/flush"}, audiences...),
		shutdown.EvicterMap(map[string]shutdown.Evicter{"orders": ev}), opts...)
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

// downURL returns the URL of a gateway that is down: nothing listens.
func downURL(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL + "/flush"
	srv.Close()
	return u
}

// newSlowGateway starts a gateway that never answers until the caller
// gives up.
func newSlowGateway(t *testing.T) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // lets the server notice a closed connection
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first
	return srv
}

// signedRequest builds a flush request for inst's registration selfCzxid,
// meant for url, signed with key at ts.
func signedRequest(t *testing.T, url string, key []byte, inst shutdown.Instance, ts time.Time) *http.Request {
	t.Helper()
	return signedFlush(t, url, key, shutdown.FlushRequest{Instance: inst, Czxid: selfCzxid, Target: url}, ts)
}

// signedFlush builds a flush request with body req, signed with key at ts.
func signedFlush(t *testing.T, url string, key []byte, req shutdown.FlushRequest, ts time.Time) *http.Request {
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
	req.Header.Set(shutdown.HeaderTimestamp, sts)
	req.Header.Set(shutdown.HeaderNonce, nonce)
	req.Header.Set(shutdown.HeaderSignature, shutdown.Sign(key, sts, nonce, body))
	return req
}

func do(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	req.Close = true // leave no idle connection behind for goleak
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp
}
