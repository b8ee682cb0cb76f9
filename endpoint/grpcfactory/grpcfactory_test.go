package grpcfactory_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	"github.com/go-kit/kit/metrics"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/endpoint/grpcfactory"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const serviceName = "gracekit.test.Quotes"

// handler answers one Get; the default answers the server's id.
type handler func(ctx context.Context, in string) (string, error)

type quotes interface {
	get(ctx context.Context, in string) (string, error)
}

type quoteServer struct {
	id string
	h  handler
}

func (q *quoteServer) get(ctx context.Context, in string) (string, error) {
	if q.h != nil {
		return q.h(ctx, in)
	}
	return q.id, nil
}

// quotesDesc is a one-method service written by hand (no generated code).
var quotesDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*quotes)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Get",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			out, err := srv.(quotes).get(ctx, in.GetValue())
			if err != nil {
				return nil, err
			}
			return wrapperspb.String(out), nil
		},
	}},
}

// serve starts a real gRPC server on a loopback port, stopped when the
// test ends.
func serve(t *testing.T, id string, h handler) (addr string, srv *grpc.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv = grpc.NewServer()
	srv.RegisterService(&quotesDesc, &quoteServer{id: id, h: h})
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ln) })
	t.Cleanup(func() { srv.Stop(); wg.Wait() })
	return ln.Addr().String(), srv
}

func newFactory(t *testing.T, opts ...grpcfactory.Option) *grpcfactory.Factory {
	t.Helper()
	f, err := grpcfactory.New(serviceName, "Get",
		func(_ context.Context, req any) (any, error) { return wrapperspb.String(req.(string)), nil },
		func(_ context.Context, resp any) (any, error) { return resp.(*wrapperspb.StringValue).GetValue(), nil },
		wrapperspb.StringValue{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// instanceEndpoint is f's endpoint for addr, closed when the test ends.
func instanceEndpoint(t *testing.T, f *grpcfactory.Factory, addr string) (kitendpoint.Endpoint, endpoint.ClosingReporter) {
	t.Helper()
	ep, closer, err := f.Factory(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closer.Close() })
	return ep, closer.(endpoint.ClosingReporter)
}

// Issue 14, item 1: with one live instance and one crashed one still
// listed in ZooKeeper, NonIdempotent calls through grpcfactory, the
// Endpointer and Retry all succeed: a refused dial is NotSent, so it is
// retried on the live instance and ejects the dead one.
func TestRefusedDialIsNotSentAndEjects(t *testing.T) {
	zkc := zktest.New(t)
	live, _ := serve(t, "live", nil)
	// crashed served, then died without deregistering: its node stays.
	crashed, crashedSrv := serve(t, "crashed", nil)
	crashedSrv.Stop()

	client, err := sd.NewClient(zkc.ConnectString(), sd.SessionTimeout(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for i, addr := range []string{live, crashed} {
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		reg, err := sd.NewRegistrar(client, sd.Instance{Name: "quotes", ID: []string{"live", "crashed"}[i], Address: host, Port: p})
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.RegisterContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = reg.DeregisterContext(context.Background()) }()
	}
	in, err := sd.NewInstancerContext(context.Background(), client, "quotes")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Stop()
	ejections := &counter{}
	eps, err := endpoint.NewEndpointer(in, newFactory(t).Factory, endpoint.WithEjectionCounter(ejections))
	if err != nil {
		t.Fatal(err)
	}
	defer eps.Close()
	testutil.WaitFor(t, "both instances listed", func() bool { return len(eps.Instances()) == 2 })
	rr, err := endpoint.NewRoundRobin(eps)
	if err != nil {
		t.Fatal(err)
	}
	call, err := endpoint.NewRetry(rr, endpoint.Attempts(3))
	if err != nil {
		t.Fatal(err)
	}

	var failed []error
	for range 40 {
		ctx, cancel := context.WithTimeout(endpoint.NonIdempotent(context.Background()), 5*time.Second)
		resp, err := call(ctx, "x")
		cancel()
		switch {
		case err != nil:
			failed = append(failed, err)
		case resp != "live":
			t.Fatalf("answered by %v", resp)
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of 40 NonIdempotent calls failed; first: %v", len(failed), failed[0])
	}
	if got := ejections.n.Load(); got < 1 {
		t.Errorf("%v ejections of the crashed instance, want at least 1", got)
	}

	t.Run("the refused call's own error is NotSent", func(t *testing.T) {
		ep, _ := instanceEndpoint(t, newFactory(t), crashed)
		_, err := ep(context.Background(), "x")
		var se *grpcfactory.StatusError
		if !errors.As(err, &se) || !se.NotSent || !errors.Is(err, endpoint.ErrNotSent) || endpoint.Classify(err) != endpoint.NotSent {
			t.Fatalf("a refused dial's error %v: class %v, want NotSent", err, endpoint.Classify(err))
		}
	})
}

// Issue 14, item 1: a connection that never gets ready (the peer accepts
// TCP but never speaks HTTP/2) is not sent either: with an attempt
// timeout, a NonIdempotent call is retried on a live instance.
func TestAConnectionNeverReadyIsNotSent(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	var conns []net.Conn
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	defer func() {
		silent.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()

	f := newFactory(t)
	ep, _ := instanceEndpoint(t, f, silent.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = ep(ctx, "x")
	cancel()
	if status.Code(err) != codes.DeadlineExceeded || endpoint.Classify(err) != endpoint.NotSent {
		t.Fatalf("a call on a connection never ready: %v, class %v; want DEADLINE_EXCEEDED, NotSent", err, endpoint.Classify(err))
	}

	live, _ := serve(t, "live", nil)
	liveEp, _ := instanceEndpoint(t, f, live)
	silentEp, _ := instanceEndpoint(t, f, silent.Addr().String())
	b := &fixedOrder{eps: []kitendpoint.Endpoint{silentEp, liveEp}}
	call, err := endpoint.NewRetry(b, endpoint.Attempts(2), endpoint.AttemptTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(endpoint.NonIdempotent(context.Background()), 10*time.Second)
	defer cancel()
	if resp, err := call(ctx, "x"); err != nil || resp != "live" {
		t.Fatalf("NonIdempotent call: %v, %v; want it retried on the live instance", resp, err)
	}
}

// counter is a go-kit metrics.Counter that counts.
type counter struct{ n atomic.Int64 }

func (c *counter) With(...string) metrics.Counter { return c }
func (c *counter) Add(d float64)                  { c.n.Add(int64(d)) }

// fixedOrder is a go-kit lb.Balancer that hands out its endpoints in turn.
type fixedOrder struct {
	mu   sync.Mutex
	eps  []kitendpoint.Endpoint
	next int
}

func (b *fixedOrder) Endpoint() (kitendpoint.Endpoint, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ep := b.eps[b.next%len(b.eps)]
	b.next++
	return ep, nil
}

// Issue 14, item 1: an UNAVAILABLE after the request went out, answered
// by the handler or from a connection cut while the call ran, may have
// been sent: Retryable, never NotSent, and a NonIdempotent call is not
// repeated.
func TestUnavailableAfterTheRequestWentOutMayHaveBeenSent(t *testing.T) {
	tests := []struct {
		give string
		h    func(srv **grpc.Server) handler
	}{
		{"the handler answers UNAVAILABLE", func(**grpc.Server) handler {
			return func(context.Context, string) (string, error) {
				return "", status.Error(codes.Unavailable, "overloaded")
			}
		}},
		{"the server is stopped while the call runs", func(srv **grpc.Server) handler {
			return func(ctx context.Context, _ string) (string, error) {
				go (*srv).Stop()
				<-ctx.Done()
				return "", ctx.Err()
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			var srv *grpc.Server
			var calls sync.WaitGroup
			h := tt.h(&srv)
			addr, s := serve(t, "x", func(ctx context.Context, in string) (string, error) {
				calls.Add(1)
				defer calls.Done()
				return h(ctx, in)
			})
			srv = s
			ep, _ := instanceEndpoint(t, newFactory(t), addr)
			n := 0
			call, err := endpoint.NewRetry(&fixedOrder{eps: []kitendpoint.Endpoint{
				func(ctx context.Context, req any) (any, error) { n++; return ep(ctx, req) },
			}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = call(endpoint.NonIdempotent(context.Background()), "x")
			if !errors.Is(err, endpoint.ErrNonIdempotent) || n != 1 {
				t.Fatalf("NonIdempotent call: %v after %d attempts, want one attempt", err, n)
			}
			var re *endpoint.RetryError
			errors.As(err, &re)
			last := re.Last()
			if status.Code(last) != codes.Unavailable || errors.Is(last, endpoint.ErrNotSent) || endpoint.Classify(last) != endpoint.Retryable {
				t.Fatalf("error %v: class %v, want UNAVAILABLE and Retryable", last, endpoint.Classify(last))
			}
			calls.Wait()
		})
	}
}

// closingServer answers with the closing signal in the header and trailer
// when asked for it, and with code when it is not OK.
func closingServer(code codes.Code) handler {
	return func(ctx context.Context, in string) (string, error) {
		if in == "closing" {
			md := metadata.Pairs(grpcfactoryClosingKey, endpoint.ClosingValue)
			_ = grpc.SetHeader(ctx, md)
			_ = grpc.SetTrailer(ctx, md)
		}
		if code != codes.OK {
			return "", status.Error(code, "failed")
		}
		return "ok", nil
	}
}

var grpcfactoryClosingKey = strings.ToLower(endpoint.ClosingHeader)

// Issue 14, suspicion (a): a response without the closing signal after
// one with it does not clear the instance's closing report.
func TestAPlainResponseDoesNotClearClosing(t *testing.T) {
	addr, _ := serve(t, "x", closingServer(codes.OK))
	ep, reporter := instanceEndpoint(t, newFactory(t), addr)
	if _, err := ep(context.Background(), "closing"); err != nil || !reporter.Closing() {
		t.Fatalf("after a closing response: err %v, closing %v", err, reporter.Closing())
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { _, _ = ep(context.Background(), "plain") })
	}
	wg.Wait()
	if !reporter.Closing() {
		t.Fatal("plain responses after a closing one cleared the closing report")
	}
}

// Issue 14, suspicion (b): the closing signal on a failed call's response
// is seen too.
func TestAClosingTrailerOnAnErrorResponseMarksClosing(t *testing.T) {
	for _, code := range []codes.Code{codes.Unavailable, codes.Internal} {
		t.Run(code.String(), func(t *testing.T) {
			addr, _ := serve(t, "x", closingServer(code))
			ep, reporter := instanceEndpoint(t, newFactory(t), addr)
			if _, err := ep(context.Background(), "closing"); status.Code(err) != code {
				t.Fatalf("call: %v, want %v", err, code)
			}
			if !reporter.Closing() {
				t.Fatal("a failed response carrying the closing signal did not mark the instance closing")
			}
		})
	}
}
