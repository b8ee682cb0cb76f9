package main

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kithttp "github.com/go-kit/kit/transport/http"
	"github.com/google/uuid"
)

// QuoteService prices symbols and takes orders. Every answer names the
// instance that gave it.
type QuoteService interface {
	Quote(ctx context.Context, symbol string) (Quote, error)
	// PlaceOrder executes an order. A non-empty key is appended to the
	// ledger as the work starts, before the answer.
	PlaceOrder(ctx context.Context, symbol string, qty int, key string) (Order, error)
}

// Quote is the answer of GET /quote.
type Quote struct {
	Symbol   string  `json:"symbol"`
	Price    float64 `json:"price"`
	Instance string  `json:"instance"`
}

// Order is the answer of POST /orders.
type Order struct {
	OrderID  string `json:"order_id"`
	Instance string `json:"instance"`
}

// errBadRequest marks a request the caller got wrong.
var errBadRequest = errors.New("bad request")

// quoteService does its work in a random time in [0.5, 1.5] × latency.
type quoteService struct {
	instance string
	latency  time.Duration
	ledger   *ledger // nil: no ledger
	warmup   *warmup // nil: warm from the start
	orders   atomic.Int64
}

func (s *quoteService) work(ctx context.Context) error {
	if err := s.warmup.cost(ctx); err != nil {
		return err
	}
	if s.latency <= 0 {
		return nil
	}
	d := time.Duration(float64(s.latency) * (0.5 + rand.Float64()))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *quoteService) Quote(ctx context.Context, symbol string) (Quote, error) {
	if symbol == "" || len(symbol) > 12 {
		return Quote{}, errBadRequest
	}
	if err := s.work(ctx); err != nil {
		return Quote{}, err
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(strings.ToUpper(symbol)))
	base := 10 + float64(h.Sum32()%9000)/100
	price := math.Round(base*(1+(rand.Float64()-0.5)/50)*100) / 100
	return Quote{Symbol: strings.ToUpper(symbol), Price: price, Instance: s.instance}, nil
}

func (s *quoteService) PlaceOrder(ctx context.Context, symbol string, qty int, key string) (Order, error) {
	if symbol == "" || qty < 1 || qty > 1_000_000 || checkKey(key) != nil {
		return Order{}, errBadRequest
	}
	// The work starts: from here on the order counts as executed.
	if err := s.ledger.Append(key); err != nil {
		return Order{}, err
	}
	if err := s.work(ctx); err != nil {
		return Order{}, err
	}
	s.orders.Add(1)
	return Order{OrderID: uuid.NewString(), Instance: s.instance}, nil
}

type quoteRequest struct{ Symbol string }

type orderRequest struct {
	Symbol string `json:"symbol"`
	Qty    int    `json:"qty"`
	Key    string `json:"-"` // Order-Key, or Idempotency-Key
}

func makeQuoteEndpoint(s QuoteService) kitendpoint.Endpoint {
	return func(ctx context.Context, req any) (any, error) {
		return s.Quote(ctx, req.(quoteRequest).Symbol)
	}
}

func makeOrderEndpoint(s QuoteService) kitendpoint.Endpoint {
	return func(ctx context.Context, req any) (any, error) {
		r := req.(orderRequest)
		return s.PlaceOrder(ctx, r.Symbol, r.Qty, r.Key)
	}
}

func decodeQuoteRequest(_ context.Context, r *http.Request) (any, error) {
	return quoteRequest{Symbol: r.URL.Query().Get("symbol")}, nil
}

func decodeOrderRequest(_ context.Context, r *http.Request) (any, error) {
	var req orderRequest
	if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 4<<10)).Decode(&req); err != nil {
		return nil, errBadRequest
	}
	req.Key = r.Header.Get(HeaderOrderKey)
	if req.Key == "" {
		req.Key = r.Header.Get(HeaderIdempotencyKey)
	}
	return req, nil
}

func encodeError(_ context.Context, err error, w http.ResponseWriter) {
	code := http.StatusInternalServerError
	if errors.Is(err, errBadRequest) {
		code = http.StatusBadRequest
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// newHandler serves the go-kit HTTP transport of s.
func newHandler(s QuoteService) http.Handler {
	opts := []kithttp.ServerOption{kithttp.ServerErrorEncoder(encodeError)}
	mux := http.NewServeMux()
	mux.Handle("GET /quote", kithttp.NewServer(makeQuoteEndpoint(s), decodeQuoteRequest, kithttp.EncodeJSONResponse, opts...))
	mux.Handle("POST /orders", kithttp.NewServer(makeOrderEndpoint(s), decodeOrderRequest, kithttp.EncodeJSONResponse, opts...))
	return mux
}
