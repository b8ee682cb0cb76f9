package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitsd "github.com/go-kit/kit/sd"
	kitlb "github.com/go-kit/kit/sd/lb"
	kithttp "github.com/go-kit/kit/transport/http"

	"github.com/gracekit/gracekit/endpoint"
)

// Requests the gateway forwards: a quote is a symbol, an order a JSON body.
type (
	quoteRequest struct{ Symbol string }
	orderRequest struct {
		Body json.RawMessage
		Key  string // the client's Idempotency-Key, passed on as Order-Key
	}
)

// Headers of an order's idempotency key: the client sends
// Idempotency-Key; the gateway passes it on to the provider as Order-Key.
// Go's http.Transport takes a POST that carries Idempotency-Key (and a
// GetBody) for one it may replay by itself on a broken keep-alive
// connection, assuming the server deduplicates; the demo provider does not
// (it counts executions), and a replay the retry layer cannot see would be
// re-sent once more when it fails to connect (examples/CONTRACT.md).
const (
	headerIdempotencyKey = "Idempotency-Key"
	headerOrderKey       = "Order-Key"
)

// upstreamError is a provider's answer other than 2xx (503 excepted, which
// endpoint.HTTPFactory turns into a retryable *endpoint.StatusError).
type upstreamError struct {
	Code int
	Body string
}

func (e *upstreamError) Error() string {
	return fmt.Sprintf("upstream answered %d: %s", e.Code, e.Body)
}

// route is one forwarded call: how to encode it for the provider.
type route struct {
	method string
	path   string
	enc    kithttp.EncodeRequestFunc
}

var (
	quoteRoute = route{http.MethodGet, "/quote", func(_ context.Context, r *http.Request, req any) error {
		r.URL.RawQuery = url.Values{"symbol": {req.(quoteRequest).Symbol}}.Encode()
		return nil
	}}
	orderRoute = route{http.MethodPost, "/orders", func(_ context.Context, r *http.Request, req any) error {
		or := req.(orderRequest)
		body := or.Body
		r.Header.Set("Content-Type", "application/json")
		if or.Key != "" {
			r.Header.Set(headerOrderKey, or.Key)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		return nil
	}}
)

// decodeUpstream returns a 2xx body as raw JSON, anything else as an
// *upstreamError.
func decodeUpstream(_ context.Context, resp *http.Response) (any, error) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, &upstreamError{Code: resp.StatusCode, Body: string(bytes.TrimSpace(b))}
	}
	return json.RawMessage(b), nil
}

// attemptsKey holds the *atomic.Int32 that counts a call's attempts.
type attemptsKey struct{}

// counted wraps a factory so that each attempt of a call is counted in the
// counter the call's ctx carries; the retries are the attempts less one.
func counted(f kitsd.Factory) kitsd.Factory {
	return func(instance string) (kitendpoint.Endpoint, io.Closer, error) {
		e, c, err := f(instance)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, req any) (any, error) {
			if n, ok := ctx.Value(attemptsKey{}).(*atomic.Int32); ok {
				n.Add(1)
			}
			return e(ctx, req)
		}, c, nil
	}
}

// forward is the gateway side of a route: it calls the upstream endpoint,
// marks orders non-idempotent, and counts requests, failures and retries.
func forward(name string, call kitendpoint.Endpoint, idempotent bool, m *metrics) kitendpoint.Endpoint {
	return func(ctx context.Context, req any) (any, error) {
		var attempts atomic.Int32
		ctx = context.WithValue(ctx, attemptsKey{}, &attempts)
		if !idempotent {
			ctx = endpoint.NonIdempotent(ctx)
		}
		resp, err := call(ctx, req)
		m.requests.WithLabelValues(name).Inc()
		if n := attempts.Load(); n > 1 {
			m.retries.WithLabelValues(name).Add(float64(n - 1))
		}
		if err != nil {
			m.failures.WithLabelValues(name).Inc()
		}
		return resp, err
	}
}

func decodeQuote(_ context.Context, r *http.Request) (any, error) {
	s := r.URL.Query().Get("symbol")
	if s == "" {
		return nil, errBadRequest
	}
	return quoteRequest{Symbol: s}, nil
}

func decodeOrder(_ context.Context, r *http.Request) (any, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 4<<10))
	if err != nil || !json.Valid(b) {
		return nil, errBadRequest
	}
	return orderRequest{Body: b, Key: r.Header.Get(headerIdempotencyKey)}, nil
}

var errBadRequest = errors.New("bad request")

func encodeRaw(_ context.Context, w http.ResponseWriter, resp any) error {
	w.Header().Set("Content-Type", "application/json")
	_, err := w.Write(resp.(json.RawMessage))
	return err
}

// encodeError answers 400 for a bad request and 502 with a JSON error for
// any failure to get an answer from a provider; "upstream" is the address
// ("host:port") of the provider the last attempt called, when known.
func encodeError(_ context.Context, err error, w http.ResponseWriter) {
	code := http.StatusBadGateway
	if errors.Is(err, errBadRequest) {
		code = http.StatusBadRequest
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	body := map[string]string{"error": err.Error()}
	if u := upstreamOf(err); u != "" {
		body["upstream"] = u
	}
	_ = json.NewEncoder(w).Encode(body)
}

// upstreamOf returns the host:port the last attempt of a failed call went
// to: the instance of gracekit's last attempt, or the URL of the request
// of go-kit's final error; "" when unknown.
func upstreamOf(err error) string {
	var re *endpoint.RetryError
	if errors.As(err, &re) && len(re.Attempts) > 0 {
		if in := re.Attempts[len(re.Attempts)-1].Instance; in != "" {
			if h, err := uriHostPort(in); err == nil {
				return h
			}
		}
		err = re.Last()
	}
	var kre kitlb.RetryError
	if errors.As(err, &kre) {
		err = kre.Final
	}
	if a := upstreamAddr(err); a != "" {
		return a
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			return u.Host
		}
	}
	return ""
}

// uriHostPort is the host:port of a gracekit instance string.
func uriHostPort(instance string) (string, error) {
	if !strings.Contains(instance, "://") {
		return instance, nil
	}
	u, err := url.Parse(instance)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}

// newMux serves the forwarded routes and /metrics.
func newMux(quote, order kitendpoint.Endpoint, m *metrics) *http.ServeMux {
	opts := []kithttp.ServerOption{kithttp.ServerErrorEncoder(encodeError)}
	mux := http.NewServeMux()
	mux.Handle("GET /api/quote", kithttp.NewServer(forward("quote", quote, true, m), decodeQuote, encodeRaw, opts...))
	mux.Handle("POST /api/orders", kithttp.NewServer(forward("orders", order, false, m), decodeOrder, encodeRaw, opts...))
	mux.Handle("GET /metrics", m.handler())
	return mux
}

// routeName is the route label of r: "quote" or "orders".
func routeName(r route) string { return strings.TrimPrefix(r.path, "/") }
