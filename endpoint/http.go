package endpoint

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kithttp "github.com/go-kit/kit/transport/http"
	"github.com/hashicorp/go-cleanhttp"
)

// Defaults of the transport that [NewHTTPFactory] builds.
const (
	// DefaultMaxIdleConnsPerHost is the idle connections kept per instance.
	DefaultMaxIdleConnsPerHost = 64
	// DefaultIdleConnTimeout closes idle connections, including those to
	// instances that went away.
	DefaultIdleConnTimeout = 30 * time.Second
)

// StatusError is the error of a response whose status the factory handles
// itself: 503 Service Unavailable, which matches [ErrUnavailable].
type StatusError struct {
	Instance string
	Code     int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("endpoint: %s answered %d %s", e.Instance, e.Code, http.StatusText(e.Code))
}

// Is reports whether target is [ErrUnavailable] and the status is 503.
func (e *StatusError) Is(target error) bool {
	return target == ErrUnavailable && e.Code == http.StatusServiceUnavailable
}

// HTTPOption configures [NewHTTPFactory].
type HTTPOption interface {
	applyHTTP(*httpOptions) error
}

type httpOptionFunc func(*httpOptions) error

func (f httpOptionFunc) applyHTTP(o *httpOptions) error { return f(o) }

type httpOptions struct {
	transport  *http.Transport
	clientOpts []kithttp.ClientOption
	scheme     string
}

// WithTransport replaces the shared transport. The factory uses it as it is.
func WithTransport(t *http.Transport) HTTPOption {
	return httpOptionFunc(func(o *httpOptions) error {
		if t == nil {
			return fmt.Errorf("endpoint: transport is nil")
		}
		o.transport = t
		return nil
	})
}

// WithClientOptions passes options to every go-kit transport/http client.
func WithClientOptions(opts ...kithttp.ClientOption) HTTPOption {
	return httpOptionFunc(func(o *httpOptions) error {
		o.clientOpts = append(o.clientOpts, opts...)
		return nil
	})
}

// HTTPScheme sets the scheme for instances published as bare "host:port"
// (default "http"). It must be "http" or "https".
func HTTPScheme(scheme string) HTTPOption {
	return httpOptionFunc(func(o *httpOptions) error {
		if scheme != "http" && scheme != "https" {
			return fmt.Errorf("endpoint: scheme %q not supported (http or https)", scheme)
		}
		o.scheme = scheme
		return nil
	})
}

// HTTPFactory builds go-kit transport/http clients, one per instance, that
// share one tuned http.Transport. Its endpoints:
//   - return a [*StatusError] matching [ErrUnavailable] for a 503 response
//     (the body is drained, the decoder is not called): [Classify] calls it
//     [Retryable], so [NewRetry] tries another instance unless the request
//     is marked [NonIdempotent];
//   - hand every other response to the decoder as it is, whatever its
//     status (2xx, a 404, a 500): the factory does not judge it, and the
//     decoder's result is the call's. An error the decoder returns is
//     classified like any other: [Permanent] (returned at once, not
//     retried) unless it matches a retryable class, and io.EOF and
//     io.ErrUnexpectedEOF, which encoding/json's Decode returns for an
//     empty or cut body, are [Retryable]. So check the status in the
//     decoder; to have a status retried, return an error that matches
//     [ErrUnavailable] (or a [*StatusError] for a 503), or give NewRetry a
//     [RetryIf]. go-kit's client closes the body when the decoder returns;
//   - report the closing signal: the io.Closer of each instance implements
//     [ClosingReporter], true while the latest response carried
//     [ClosingHeader];
//   - return transport errors unchanged, for [Classify] (a refused dial is
//     [NotSent], a reset connection [Retryable]).
type HTTPFactory struct {
	method    string
	path      string
	enc       kithttp.EncodeRequestFunc
	dec       kithttp.DecodeResponseFunc
	client    *http.Client
	transport *http.Transport
	opts      httpOptions
}

// NewHTTPFactory returns a factory for requests of method to path (appended
// to the instance's base URL) encoded by enc and decoded by dec. dec sees
// every response but a 503, non-2xx ones included, and its error is the
// call's (see [HTTPFactory] for how each is retried).
func NewHTTPFactory(method, path string, enc kithttp.EncodeRequestFunc, dec kithttp.DecodeResponseFunc, opts ...HTTPOption) (*HTTPFactory, error) {
	switch {
	case method == "":
		return nil, fmt.Errorf("endpoint: HTTP method is empty")
	case enc == nil:
		return nil, fmt.Errorf("endpoint: request encoder is nil")
	case dec == nil:
		return nil, fmt.Errorf("endpoint: response decoder is nil")
	}
	o := httpOptions{scheme: "http"}
	for _, opt := range opts {
		if err := opt.applyHTTP(&o); err != nil {
			return nil, err
		}
	}
	t := o.transport
	if t == nil {
		t = cleanhttp.DefaultPooledTransport()
		t.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
		t.IdleConnTimeout = DefaultIdleConnTimeout
	}
	return &HTTPFactory{
		method:    method,
		path:      path,
		enc:       enc,
		dec:       dec,
		client:    &http.Client{Transport: t},
		transport: t,
		opts:      o,
	}, nil
}

// Transport returns the shared transport.
func (f *HTTPFactory) Transport() *http.Transport { return f.transport }

// Close closes the shared transport's idle connections.
func (f *HTTPFactory) Close() error {
	f.transport.CloseIdleConnections()
	return nil
}

// Factory implements go-kit's sd.Factory; pass the method value
// (f.Factory) to [NewEndpointer]. instance is "host:port" or a base URL.
func (f *HTTPFactory) Factory(instance string) (kitendpoint.Endpoint, io.Closer, error) {
	base := instance
	if !strings.Contains(base, "://") {
		base = f.opts.scheme + "://" + base
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, nil, fmt.Errorf("endpoint: instance %q: %w", instance, err)
	}
	if u.Host == "" {
		return nil, nil, fmt.Errorf("endpoint: instance %q has no host", instance)
	}
	u = u.JoinPath(f.path)
	st := &httpInstance{}
	dec := func(ctx context.Context, resp *http.Response) (any, error) {
		if closing := resp.Header.Get(ClosingHeader) == ClosingValue; closing != st.closing.Load() {
			st.closing.Store(closing)
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
			return nil, &StatusError{Instance: instance, Code: resp.StatusCode}
		}
		return f.dec(ctx, resp)
	}
	opts := append([]kithttp.ClientOption{kithttp.SetClient(f.client)}, f.opts.clientOpts...)
	ep := kithttp.NewClient(f.method, u, f.enc, dec, opts...).Endpoint()
	return func(ctx context.Context, request any) (any, error) {
		// net/http may replay a request on a new connection by itself (a
		// GET, or any request with an Idempotency-Key header, whose reused
		// connection broke): its final error, a refused dial say, would
		// look NotSent although an earlier write may have run the request.
		var wrote atomic.Bool
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(i httptrace.WroteRequestInfo) {
				if i.Err == nil {
					wrote.Store(true)
				}
			},
		})
		resp, err := ep(ctx, request)
		if err != nil && wrote.Load() {
			err = &WrittenError{Instance: instance, Err: err}
		}
		return resp, err
	}, st, nil
}

// WrittenError is the error of a call whose request was written to the
// instance at least once: whatever failed afterwards, the instance may
// have run it, so [Classify] never calls it [NotSent].
type WrittenError struct {
	Instance string
	Err      error
}

func (e *WrittenError) Error() string {
	return fmt.Sprintf("endpoint: %s (the request was sent to %s)", e.Err, e.Instance)
}

// Unwrap returns the call's error.
func (e *WrittenError) Unwrap() error { return e.Err }

// httpInstance is the io.Closer of one instance's client.
type httpInstance struct {
	closing atomic.Bool
}

// Close does nothing: the transport is shared, and idle connections to the
// instance expire after the transport's IdleConnTimeout.
func (h *httpInstance) Close() error { return nil }

// Closing implements ClosingReporter.
func (h *httpInstance) Closing() bool { return h.closing.Load() }
