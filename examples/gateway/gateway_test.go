package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitlb "github.com/go-kit/kit/sd/lb"
	"go.uber.org/goleak"

	"github.com/gracekit/gracekit/endpoint"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCuratorFactoryCallsTheNodesAddress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_ = json.NewEncoder(w).Encode(map[string]string{"path": r.URL.Path, "method": r.Method, "body": string(b)})
	}))
	defer srv.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	node := `{"name":"quote","id":"quote-1","address":"` + host + `","port":` + port + `,"payload":{}}`

	f := curatorFactory(orderRoute)
	e, _, err := f(node)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e(context.Background(), orderRequest{Body: json.RawMessage(`{"symbol":"ABC","qty":3}`)})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(resp.(json.RawMessage), &got); err != nil {
		t.Fatal(err)
	}
	if got["path"] != "/orders" || got["method"] != http.MethodPost || got["body"] != `{"symbol":"ABC","qty":3}` {
		t.Fatalf("provider saw %v", got)
	}
	if _, _, err := f("127.0.0.1:8080"); err == nil {
		t.Fatal("a plain host:port was taken for a Curator node")
	}
}

func TestUpstreamErrorsAnswer502(t *testing.T) {
	m := newMetrics("graceful")
	fail := func(context.Context, any) (any, error) { return nil, errors.New("connection refused") }
	mux := newMux(fail, fail, m)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/quote?symbol=ABC", nil))
	if rec.Code != http.StatusBadGateway || !strings.Contains(rec.Body.String(), `"error"`) {
		t.Fatalf("got %d %s, want 502 with a JSON error", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `gateway_failures_total{mode="graceful",route="quote"} 1`) {
		t.Fatalf("metrics do not count the failure:\n%s", rec.Body)
	}
}

func TestLoopbackFactoryRefusesOtherAddresses(t *testing.T) {
	calls := 0
	inner := func(string) (kitendpoint.Endpoint, io.Closer, error) {
		calls++
		return func(context.Context, any) (any, error) { return nil, nil }, nil, nil
	}
	uri := loopbackFactory(inner, uriHost)
	for _, inst := range []string{"127.0.0.1:8080", "http://127.0.0.1:8080", "[::1]:8080", "https://[::1]:8443", "127.5.6.7:80"} {
		if _, _, err := uri(inst); err != nil {
			t.Errorf("%q refused: %v", inst, err)
		}
	}
	for _, inst := range []string{"10.0.0.5:8080", "http://192.168.1.2:8080", "localhost:8080", "quote.example.com:80", "[2001:db8::1]:80", "0.0.0.0:80", "not an instance", "http://:80"} {
		if _, _, err := uri(inst); err == nil {
			t.Errorf("%q accepted", inst)
		}
	}
	cur := loopbackFactory(inner, curatorHost)
	if _, _, err := cur(`{"name":"quote","id":"q","address":"127.0.0.1","port":8080}`); err != nil {
		t.Errorf("loopback Curator node refused: %v", err)
	}
	if _, _, err := cur(`{"name":"quote","id":"q","address":"10.1.2.3","port":8080}`); err == nil {
		t.Error("Curator node at 10.1.2.3 accepted")
	}
	if calls != 6 {
		t.Errorf("the wrapped factory was called %d times, want 6 (the loopback instances only)", calls)
	}
}

func TestUpstreamOfNamesTheLastAttempt(t *testing.T) {
	ue := &url.Error{Op: "Post", URL: "http://127.0.0.1:4002/orders", Err: errors.New("EOF")}
	tests := []struct {
		give error
		want string
	}{
		{&endpoint.RetryError{Reason: endpoint.ErrNonIdempotent, Attempts: []*endpoint.AttemptError{{Attempt: 1, Instance: "127.0.0.1:4001", Err: ue}, {Attempt: 2, Instance: "http://127.0.0.1:4002", Err: ue}}}, "127.0.0.1:4002"},
		{kitlb.RetryError{RawErrors: []error{ue}, Final: ue}, "127.0.0.1:4002"},
		{errors.New("no address"), ""},
	}
	for _, tt := range tests {
		if got := upstreamOf(tt.give); got != tt.want {
			t.Errorf("upstreamOf(%v) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func TestOrdersPassTheKeyOnAsOrderKey(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/api/orders", strings.NewReader(`{"symbol":"ABC","qty":1}`))
	r.Header.Set(headerIdempotencyKey, "k1")
	req, err := decodeOrder(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/orders", nil)
	if err := orderRoute.enc(context.Background(), out, req); err != nil {
		t.Fatal(err)
	}
	if out.Header.Get(headerOrderKey) != "k1" || out.Header.Get(headerIdempotencyKey) != "" {
		t.Errorf("headers %v, want Order-Key k1 and no Idempotency-Key", out.Header)
	}
}
