package main

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitlb "github.com/go-kit/kit/sd/lb"
	kitgrpc "github.com/go-kit/kit/transport/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/examples/internal/quotegrpc"
)

// keyRecorder is a quote provider that records the keys of its orders.
type keyRecorder struct {
	mu   sync.Mutex
	keys []string
}

func (k *keyRecorder) Get(_ context.Context, symbol string) (*structpb.Struct, error) {
	return structpb.NewStruct(map[string]any{"symbol": symbol, "price": 12.5, "instance": "quote-grpc-1"})
}

func (k *keyRecorder) PlaceOrder(ctx context.Context, order *structpb.Struct) (*structpb.Struct, error) {
	k.mu.Lock()
	k.keys = append(k.keys, quotegrpc.KeyFrom(ctx))
	k.mu.Unlock()
	return structpb.NewStruct(map[string]any{"order_id": "o-1", "instance": "quote-grpc-1", "qty": order.GetFields()["qty"].GetNumberValue()})
}

// serveQuotes serves rec on a real loopback listener and returns its
// address and a func that stops it.
func serveQuotes(t *testing.T, rec *keyRecorder) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	quotegrpc.Register(s, rec)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	var once sync.Once
	stop = func() { once.Do(func() { s.Stop(); <-done }) }
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// orderThrough sends one order with key k through e as the gateway's
// route does (the key reaches the metadata through withOrderKey).
func orderThrough(e kitendpoint.Endpoint, k string) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return withOrderKey(e)(endpoint.NonIdempotent(ctx), orderRequest{Body: json.RawMessage(`{"symbol":"ABC","qty":3}`), Key: k})
}

func TestGoKitGRPCFactoryCallsTheNodesAddressWithTheKey(t *testing.T) {
	rec := &keyRecorder{}
	addr, stop := serveQuotes(t, rec)
	host, port, _ := net.SplitHostPort(addr)
	node := `{"name":"quote-grpc","id":"quote-grpc-1","address":"` + host + `","port":` + port + `,"payload":{}}`

	e, closer, err := kitGRPCFactory(grpcMethods[1], true)(node)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	resp, err := orderThrough(e, "k-1")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(resp.(json.RawMessage), &got); err != nil || got["instance"] != "quote-grpc-1" || got["qty"] != 3.0 {
		t.Fatalf("answer %s (%v)", resp, err)
	}
	if rec.keys[0] != "k-1" {
		t.Fatalf("provider saw keys %q, want k-1", rec.keys)
	}
	// A failed call names the provider, through go-kit's RetryError too.
	stop()
	_, err = orderThrough(kitlb.Retry(1, 2*time.Second, kitlb.NewRoundRobin(fixedEndpointer{e})), "k-2")
	if err == nil || upstreamOf(err) != addr {
		t.Fatalf("call to a stopped provider: %v, upstream %q, want %s", err, upstreamOf(err), addr)
	}

	other := `{"name":"quote-grpc","id":"x","address":"10.1.2.3","port":` + port + `,"payload":{}}`
	if _, _, err := kitGRPCFactory(grpcMethods[1], true)(other); err == nil {
		t.Fatal("GATEWAY_LOOPBACK_ONLY: a non-loopback node was taken")
	}
}

func TestGracekitGRPCFactoriesSendTheKey(t *testing.T) {
	rec := &keyRecorder{}
	addr, _ := serveQuotes(t, rec)
	fs, err := grpcFactories(true)
	if err != nil {
		t.Fatal(err)
	}
	e, closer, err := fs[1](addr)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if _, err := orderThrough(e, "k-3"); err != nil {
		t.Fatal(err)
	}
	if rec.keys[0] != "k-3" {
		t.Fatalf("provider saw keys %q, want k-3", rec.keys)
	}
	if _, _, err := fs[0]("10.1.2.3:" + strconv.Itoa(1)); err == nil {
		t.Fatal("GATEWAY_LOOPBACK_ONLY: a non-loopback instance was taken")
	}
}

func TestLoopbackDialerRefusesOtherAddresses(t *testing.T) {
	if _, err := loopbackDialer(context.Background(), "10.1.2.3:80"); err == nil {
		t.Fatal("dialed a non-loopback address")
	}
}

// fixedEndpointer serves one endpoint, for go-kit's balancer.
type fixedEndpointer struct{ e kitendpoint.Endpoint }

func (f fixedEndpointer) Endpoints() ([]kitendpoint.Endpoint, error) {
	return []kitendpoint.Endpoint{f.e}, nil
}

// heldQuotes answers Get once release is closed; started gets a value as
// each call begins.
type heldQuotes struct {
	keyRecorder
	started chan struct{}
	release chan struct{}
}

func (h *heldQuotes) Get(ctx context.Context, symbol string) (*structpb.Struct, error) {
	h.started <- struct{}{}
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.keyRecorder.Get(ctx, symbol)
}

func serveHeld(t *testing.T) (*heldQuotes, string) {
	t.Helper()
	h := &heldQuotes{started: make(chan struct{}, 4), release: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	quotegrpc.Register(s, h)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return h, ln.Addr().String()
}

// getAsync calls e's Get and returns where its error goes.
func getAsync(e kitendpoint.Endpoint) <-chan error {
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := e(ctx, quoteRequest{Symbol: "ABC"})
		errc <- err
	}()
	return errc
}

// What go-kit's documented factory does at a provider's deregistration:
// the Endpointer closes the ClientConn, and the call in flight fails,
// for lb.Retry to send again.
func TestClientConnCloseCancelsCallsInFlight(t *testing.T) {
	h, addr := serveHeld(t)
	defer close(h.release)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	e := kitgrpc.NewClient(cc, quotegrpc.ServiceName, quotegrpc.MethodGet, grpcMethods[0].enc, decodeStruct, new(structpb.Struct)).Endpoint()
	errc := getAsync(e)
	<-h.started
	cc.Close() // what go-kit's endpoint cache does with the io.Closer
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("the call in flight got %v, want Canceled", err)
	}
}

func TestKitGRPCFactoryClosesOnceTheCallsInFlightFinished(t *testing.T) {
	h, addr := serveHeld(t)
	host, port, _ := net.SplitHostPort(addr)
	node := `{"name":"quote-grpc","id":"quote-grpc-1","address":"` + host + `","port":` + port + `,"payload":{}}`
	e, closer, err := kitGRPCFactory(grpcMethods[0], true)(node)
	if err != nil {
		t.Fatal(err)
	}
	errc := getAsync(e)
	<-h.started
	if err := closer.Close(); err != nil { // the instance left ZooKeeper
		t.Fatal(err)
	}
	close(h.release)
	if err := <-errc; err != nil {
		t.Fatalf("the call in flight at Close failed: %v", err)
	}
	// The ClientConn is closed once it finished.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e(ctx, quoteRequest{Symbol: "ABC"}); status.Code(err) != codes.Canceled {
		t.Fatalf("a call after the last one ended: %v, want Canceled (the ClientConn closed)", err)
	}
}
