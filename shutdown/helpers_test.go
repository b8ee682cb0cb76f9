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
	"testing"
	"time"

	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
)

var (
	secret = []byte("0123456789abcdef-shared")
	self   = shutdown.Instance{Service: "orders", ID: "orders-1", Address: "10.0.0.7", Port: 8080}
)

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
	fail error
}

func (e *evictions) Evict(_ context.Context, inst shutdown.Instance) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fail != nil {
		return e.fail
	}
	e.got = append(e.got, inst)
	return nil
}

func (e *evictions) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.got)
}

// newGateway starts a real HTTP gateway serving a flush Handler for the
// "orders" service.
func newGateway(t *testing.T) (*httptest.Server, *evictions) {
	t.Helper()
	ev := &evictions{}
	h, err := shutdown.NewHandler(secret, shutdown.EvicterMap(map[string]shutdown.Evicter{"orders": ev}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, ev
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

// signedRequest builds a flush request signed with key at ts.
func signedRequest(t *testing.T, url string, key []byte, inst any, ts time.Time) *http.Request {
	t.Helper()
	body, err := json.Marshal(inst)
	if err != nil {
		t.Fatal(err)
	}
	return signedRaw(t, url, key, body, ts, strconv.FormatInt(time.Now().UnixNano(), 16))
}

func signedRaw(t *testing.T, url string, key, body []byte, ts time.Time, nonce string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
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
