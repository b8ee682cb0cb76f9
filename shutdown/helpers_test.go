package shutdown_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
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

// gracekit's registrar is a Registration.
var _ shutdown.Registration = (*sd.Registrar)(nil)

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

// evictions counts what a gateway evicted.
type evictions struct {
	mu  sync.Mutex
	got []flush.Request
}

func (e *evictions) Evict(_ context.Context, req flush.Request) (flush.Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, req)
	return flush.Evicted, nil
}

func (e *evictions) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.got)
}

// newGateway starts a real HTTP gateway serving a flush Handler for the
// "orders" service, whose audiences are its URL and its URL + "/flush".
func newGateway(t *testing.T) (*httptest.Server, *evictions) {
	t.Helper()
	ev := &evictions{}
	srv := httptest.NewUnstartedServer(nil)
	t.Cleanup(srv.Close)
	url := "http://" + srv.Listener.Addr().String()
	h, err := flush.NewHandler(secret, []string{url, url + "/flush"},
		flush.EvicterMap(map[string]flush.Evicter{"orders": ev}))
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = h
	srv.Start()
	return srv, ev
}

// getAsync GETs url on a connection of its own in a goroutine and sends
// the response (its body closed), or nil after reporting the error. The
// caller receives from the channel before the test ends.
func getAsync(t *testing.T, url string) <-chan *http.Response {
	out := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Close = true
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			out <- nil
			return
		}
		_ = resp.Body.Close()
		out <- resp
	}()
	return out
}
