// Package grpcfactory builds go-kit endpoints that call one gRPC method on
// each instance an endpoint.Endpointer holds, over go-kit's transport/grpc:
// one *grpc.ClientConn per instance, closed by the Endpointer only after
// the calls in flight on it finished, once the instance left discovery.
//
// What a failed call says, for endpoint.Classify and so for Retry and the
// outlier ejection:
//   - a call that never reached a connection (refused, no route, the
//     connection never got ready: no request header was handed to any
//     transport in any attempt) fails UNAVAILABLE, or DEADLINE_EXCEEDED
//     while the ClientConn is not ready, with a *StatusError whose NotSent
//     is true; it matches endpoint.ErrNotSent, so it is endpoint.NotSent:
//     retried even for endpoint.NonIdempotent requests, and counted as a
//     connect failure;
//   - an UNAVAILABLE after the request went out only matches
//     endpoint.ErrUnavailable: endpoint.Retryable, so not retried for
//     endpoint.NonIdempotent requests.
//
// A response that carries the closing signal (see grpcstop) in its header
// or trailer, successful or not, makes the instance report closing
// (endpoint.ClosingReporter) from then on, and the Endpointer stops picking
// it. The report never goes back: the Endpointer makes a new endpoint, with
// a new ClientConn, when the instance leaves discovery and comes back.
package grpcfactory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitsd "github.com/go-kit/kit/sd"
	kitgrpc "github.com/go-kit/kit/transport/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/gracekit/gracekit/endpoint"
)

// Option configures New.
type Option interface{ apply(*options) error }

type options struct {
	dial   []grpc.DialOption
	client []kitgrpc.ClientOption
}

type optionFunc func(*options) error

func (f optionFunc) apply(o *options) error { return f(o) }

// DialOptions are given to grpc.NewClient for every instance; without
// grpc.WithTransportCredentials among them, connections are insecure
// (plaintext), as on a service mesh or a trusted network. The factory adds
// a stats.Handler and a unary interceptor of its own (see Factory).
func DialOptions(opts ...grpc.DialOption) Option {
	return optionFunc(func(o *options) error { o.dial = append(o.dial, opts...); return nil })
}

// ClientOptions are given to go-kit's grpc.NewClient for every instance.
func ClientOptions(opts ...kitgrpc.ClientOption) Option {
	return optionFunc(func(o *options) error { o.client = append(o.client, opts...); return nil })
}

// Factory makes the endpoint of one gRPC method for each instance.
type Factory struct {
	service, method string
	enc             kitgrpc.EncodeRequestFunc
	dec             kitgrpc.DecodeResponseFunc
	reply           any
	opts            options
}

// New returns a Factory for the method of service (its full name, e.g.
// "quote.v1.Quotes", and "Get"), with go-kit's encode and decode funcs and
// a zero value of the reply message, as go-kit's grpc.NewClient takes them.
func New(service, method string, enc kitgrpc.EncodeRequestFunc, dec kitgrpc.DecodeResponseFunc, reply any, opts ...Option) (*Factory, error) {
	switch {
	case service == "" || method == "" || strings.Contains(method, "/"):
		return nil, fmt.Errorf("grpcfactory: invalid service %q or method %q (want e.g. \"quote.v1.Quotes\" and \"Get\")", service, method)
	case enc == nil || dec == nil || reply == nil:
		return nil, errors.New("grpcfactory: encode, decode and reply are required")
	}
	f := &Factory{service: service, method: method, enc: enc, dec: dec, reply: reply}
	for _, o := range opts {
		if err := o.apply(&f.opts); err != nil {
			return nil, err
		}
	}
	return f, nil
}

var _ kitsd.Factory = (*Factory)(nil).Factory

// Factory implements go-kit's sd.Factory for instance ("host:port"). The
// io.Closer closes the instance's ClientConn; it also reports the closing
// signal (endpoint.ClosingReporter).
//
// The ClientConn gets, after the DialOptions, a stats.Handler that notes
// whether a call's request header was handed to a transport, and a unary
// interceptor that reads the closing signal in the header and trailer of
// every response, failed ones included (go-kit's ClientAfter only sees
// successful ones).
func (f *Factory) Factory(instance string) (kitendpoint.Endpoint, io.Closer, error) {
	c := &conn{instance: instance}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, f.opts.dial...)
	dial = append(dial, grpc.WithStatsHandler(sentHandler{}), grpc.WithChainUnaryInterceptor(c.intercept))
	// passthrough: the Instancer already resolved the instance; no DNS.
	cc, err := grpc.NewClient("passthrough:///"+instance, dial...)
	if err != nil {
		return nil, nil, fmt.Errorf("grpcfactory: %s: %w", instance, err)
	}
	c.cc = cc
	ep := kitgrpc.NewClient(cc, f.service, f.method, f.enc, f.dec, f.reply, f.opts.client...).Endpoint()
	return func(ctx context.Context, req any) (any, error) {
		call := &callState{}
		resp, err := ep(context.WithValue(ctx, callKey{}, call), req)
		if err != nil {
			return nil, c.wrap(err, call)
		}
		return resp, nil
	}, c, nil
}

// callState is what the stats handler saw of one call, over every attempt.
type callState struct{ sent atomic.Bool }

type callKey struct{}

// sentHandler marks a call sent when an attempt handed its request header
// to a transport (stats.OutHeader): from then on the instance may have
// received it, even if the attempt failed or grpc-go retried it.
type sentHandler struct{}

func (sentHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (sentHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.OutHeader); ok {
		if call, _ := ctx.Value(callKey{}).(*callState); call != nil {
			call.sent.Store(true)
		}
	}
}

func (sentHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (sentHandler) HandleConn(context.Context, stats.ConnStats) {}

// conn is one instance's connection.
type conn struct {
	cc       *grpc.ClientConn
	instance string
	closing  atomic.Bool // only ever set: see the package doc
}

// intercept reads the closing signal of every unary response, whatever
// its status.
func (c *conn) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var header, trailer metadata.MD
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&header), grpc.Trailer(&trailer))...)
	if closingIn(header) || closingIn(trailer) {
		c.closing.Store(true)
	}
	return err
}

func closingIn(md metadata.MD) bool {
	for _, v := range md.Get(strings.ToLower(endpoint.ClosingHeader)) {
		if v == endpoint.ClosingValue {
			return true
		}
	}
	return false
}

// Closing implements endpoint.ClosingReporter.
func (c *conn) Closing() bool { return c.closing.Load() }

// Close closes the ClientConn.
func (c *conn) Close() error { return c.cc.Close() }

// StatusError is a failed call's gRPC status, naming the instance.
type StatusError struct {
	Instance string
	Err      error // as the gRPC client returned it; status.FromError reads it
	// NotSent is true when no attempt of the call handed its request to a
	// connection and the call failed UNAVAILABLE, or DEADLINE_EXCEEDED
	// while the ClientConn was not ready: the instance never saw it.
	NotSent bool
}

func (e *StatusError) Error() string {
	if e.NotSent {
		return fmt.Sprintf("grpcfactory: %s: %v (not sent)", e.Instance, e.Err)
	}
	return fmt.Sprintf("grpcfactory: %s: %v", e.Instance, e.Err)
}

// Unwrap returns the gRPC error.
func (e *StatusError) Unwrap() error { return e.Err }

// GRPCStatus lets status.FromError and status.Code see through the wrap.
func (e *StatusError) GRPCStatus() *status.Status { return status.Convert(e.Err) }

// Is matches endpoint.ErrNotSent when NotSent, and endpoint.ErrUnavailable
// for an UNAVAILABLE status (endpoint.Classify looks for ErrNotSent first).
func (e *StatusError) Is(target error) bool {
	switch target {
	case endpoint.ErrNotSent:
		return e.NotSent
	case endpoint.ErrUnavailable:
		return status.Code(e.Err) == codes.Unavailable
	}
	return false
}

func (c *conn) wrap(err error, call *callState) error {
	st, ok := status.FromError(err)
	if !ok {
		return err // from encode or decode, not the call
	}
	notSent := false
	if !call.sent.Load() {
		switch st.Code() {
		case codes.Unavailable:
			notSent = true
		case codes.DeadlineExceeded:
			// The connection never got ready in time; on a ready one the
			// call waited for a stream instead, and is not a connect failure.
			notSent = c.cc.GetState() != connectivity.Ready
		}
	}
	return &StatusError{Instance: c.instance, Err: err, NotSent: notSent}
}
