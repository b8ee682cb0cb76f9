package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/gracekit/gracekit/examples/internal/quotegrpc"
)

// serveGRPC serves svc on a real loopback listener until the test ends and
// returns a client connection to it.
func serveGRPC(t *testing.T, svc QuoteService) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newGRPCServer(nil, svc)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); s.Stop(); <-done })
	return cc
}

func TestGRPCAnswersWithTheInstanceAndLedgersTheMetadataKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	led, err := openLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	cc := serveGRPC(t, &quoteService{instance: "quote-grpc-7", ledger: led})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	q, err := quotegrpc.Get(ctx, cc, "abc")
	if f := q.GetFields(); err != nil || f["symbol"].GetStringValue() != "ABC" || f["price"].GetNumberValue() <= 0 || f["instance"].GetStringValue() != "quote-grpc-7" {
		t.Fatalf("Get = %v, %v", q, err)
	}
	order, _ := structpb.NewStruct(map[string]any{"symbol": "ABC", "qty": 3})
	o, err := quotegrpc.PlaceOrder(ctx, cc, order, "run-graceful-5")
	if f := o.GetFields(); err != nil || f["order_id"].GetStringValue() == "" || f["instance"].GetStringValue() != "quote-grpc-7" {
		t.Fatalf("PlaceOrder = %v, %v", o, err)
	}
	// A bad key is refused before the work starts: not in the ledger.
	if _, err := quotegrpc.PlaceOrder(ctx, cc, order, "has space"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("PlaceOrder with a bad key: %v, want InvalidArgument", err)
	}
	bad, _ := structpb.NewStruct(map[string]any{"symbol": "ABC", "qty": 0})
	if _, err := quotegrpc.PlaceOrder(ctx, cc, bad, "k2"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("PlaceOrder with qty 0: %v, want InvalidArgument", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(b)); len(got) != 1 || got[0] != "run-graceful-5" {
		t.Errorf("ledger %q, want the one key executed", got)
	}
}
