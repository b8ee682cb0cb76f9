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
	"sync/atomic"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitsd "github.com/go-kit/kit/sd"
	kithttp "github.com/go-kit/kit/transport/http"

	"github.com/gracekit/gracekit/endpoint"
)

// Requests the gateway forwards: a quote is a symbol, an order a JSON body.
type (
	quoteRequest struct{ Symbol string }
	orderRequest struct{ Body json.RawMessage }
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
		body := req.(orderRequest).Body
		r.Header.Set("Content-Type", "application/json")
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
	return orderRequest{Body: b}, nil
}

var errBadRequest = errors.New("bad request")

func encodeRaw(_ context.Context, w http.ResponseWriter, resp any) error {
	w.Header().Set("Content-Type", "application/json")
	_, err := w.Write(resp.(json.RawMessage))
	return err
}

// encodeError answers 400 for a bad request and 502 with a JSON error for
// any failure to get an answer from a provider.
func encodeError(_ context.Context, err error, w http.ResponseWriter) {
	code := http.StatusBadGateway
	if errors.Is(err, errBadRequest) {
		code = http.StatusBadRequest
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
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
