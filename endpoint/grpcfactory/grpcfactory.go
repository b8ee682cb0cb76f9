// Package grpcfactory builds go-kit endpoints that call one gRPC method on
// each instance an endpoint.Endpointer holds, over go-kit's transport/grpc:
// one *grpc.ClientConn per instance, closed by the Endpointer only after
// the calls in flight on it finished, once the instance left discovery.
//
// A response that carries the closing signal (see grpcstop) makes the
// Endpointer stop picking that instance; an UNAVAILABLE status matches
// endpoint.ErrUnavailable, so endpoint.Classify retries it unless the
// request is endpoint.NonIdempotent.
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
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
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
// (plaintext), as on a service mesh or a trusted network.
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
func (f *Factory) Factory(instance string) (kitendpoint.Endpoint, io.Closer, error) {
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, f.opts.dial...)
	// passthrough: the Instancer already resolved the instance; no DNS.
	cc, err := grpc.NewClient("passthrough:///"+instance, dial...)
	if err != nil {
		return nil, nil, fmt.Errorf("grpcfactory: %s: %w", instance, err)
	}
	c := &conn{cc: cc, instance: instance}
	copts := append(append([]kitgrpc.ClientOption(nil), f.opts.client...), kitgrpc.ClientAfter(c.after))
	ep := kitgrpc.NewClient(cc, f.service, f.method, f.enc, f.dec, f.reply, copts...).Endpoint()
	return func(ctx context.Context, req any) (any, error) {
		resp, err := ep(ctx, req)
		if err != nil {
			return nil, c.wrap(err)
		}
		return resp, nil
	}, c, nil
}

// conn is one instance's connection.
type conn struct {
	cc       *grpc.ClientConn
	instance string
	closing  atomic.Bool
}

func (c *conn) after(ctx context.Context, header, trailer metadata.MD) context.Context {
	c.closing.Store(closingIn(header) || closingIn(trailer))
	return ctx
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
}

func (e *StatusError) Error() string { return fmt.Sprintf("grpcfactory: %s: %v", e.Instance, e.Err) }

// Unwrap returns the gRPC error.
func (e *StatusError) Unwrap() error { return e.Err }

// GRPCStatus lets status.FromError and status.Code see through the wrap.
func (e *StatusError) GRPCStatus() *status.Status { return status.Convert(e.Err) }

// Is matches endpoint.ErrUnavailable for an UNAVAILABLE status.
func (e *StatusError) Is(target error) bool {
	return target == endpoint.ErrUnavailable && status.Code(e.Err) == codes.Unavailable
}

func (c *conn) wrap(err error) error {
	if _, ok := status.FromError(err); !ok {
		return err // from encode or decode, not the call
	}
	return &StatusError{Instance: c.instance, Err: err}
}
