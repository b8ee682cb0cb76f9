package main

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/zktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start serves q through a provider registered in zkc, and a client of it.
func start(t *testing.T, zkc *zktest.Cluster, q quotes) (*provider.Provider, *grpc.ClientConn) {
	t.Helper()
	sess, err := sd.NewSession(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inst := sd.Instance{Name: "ticks", ID: q.id, Address: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port}
	p, err := newProvider(sess, inst, ln, q, provider.Config{QuietWindow: 50 * time.Millisecond, MaxQuiesce: 300 * time.Millisecond, DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return p, cc
}

// recv reads the stream to its end: the messages and how it ended.
func recv(s grpc.ClientStream) (int, error) {
	for n := 0; ; n++ {
		if err := s.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			return n, err
		}
	}
}

// A server stream in flight at the stop either finishes within the
// drain's bound, or is cut and reported; the stop never outlives its
// deadline.
func TestAStreamInFlightAtStopFinishesOrIsCutAndReported(t *testing.T) {
	zkc := zktest.New(t)
	for _, tt := range []struct {
		name    string
		give    quotes
		wantCut bool
	}{
		{"a short stream finishes", quotes{id: "short", n: 5, interval: 50 * time.Millisecond}, false},
		{"a long stream is cut and counted", quotes{id: "long", n: 1000, interval: 50 * time.Millisecond}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, cc := start(t, zkc, tt.give)
			s, err := Watch(context.Background(), cc, "ACME")
			if err != nil {
				t.Fatal(err)
			}
			if err := s.RecvMsg(new(wrapperspb.StringValue)); err != nil {
				t.Fatalf("first tick: %v", err)
			}
			got := make(chan error, 1)
			var n int
			go func() {
				var err error
				n, err = recv(s)
				got <- err
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = p.Stop(ctx)
			if dl, _ := ctx.Deadline(); time.Now().After(dl) {
				t.Fatal("the stop returned after its deadline")
			}
			end := <-got
			r := p.Report()
			if !tt.wantCut {
				if err != nil || !errors.Is(end, io.EOF) || n+1 != tt.give.n || r.CutByDrain != 0 {
					t.Fatalf("stop %v; stream ended %v after %d ticks; cut %d: want the whole stream, nothing cut", err, end, n+1, r.CutByDrain)
				}
				return
			}
			var de *shutdown.DrainError
			if !errors.As(err, &de) || r.CutByDrain != 1 || errors.Is(end, io.EOF) {
				t.Fatalf("stop %v; stream ended %v; cut %d: want one stream cut and reported", err, end, r.CutByDrain)
			}
		})
	}
}
