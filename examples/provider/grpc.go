package main

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/gracekit/gracekit/examples/internal/quotegrpc"
)

// grpcQuotes serves a QuoteService as quotegrpc's service: the same work
// and the same ledger as over HTTP; an order's key is the call's
// idempotency-key metadata.
type grpcQuotes struct{ svc QuoteService }

var _ quotegrpc.Server = grpcQuotes{}

func (g grpcQuotes) Get(ctx context.Context, symbol string) (*structpb.Struct, error) {
	q, err := g.svc.Quote(ctx, symbol)
	if err != nil {
		return nil, grpcError(err)
	}
	return structpb.NewStruct(map[string]any{"symbol": q.Symbol, "price": q.Price, "instance": q.Instance})
}

func (g grpcQuotes) PlaceOrder(ctx context.Context, order *structpb.Struct) (*structpb.Struct, error) {
	f := order.GetFields()
	o, err := g.svc.PlaceOrder(ctx, f["symbol"].GetStringValue(), int(f["qty"].GetNumberValue()), quotegrpc.KeyFrom(ctx))
	if err != nil {
		return nil, grpcError(err)
	}
	return structpb.NewStruct(map[string]any{"order_id": o.OrderID, "instance": o.Instance})
}

// grpcError maps the service's errors to gRPC statuses.
func grpcError(err error) error {
	switch {
	case errors.Is(err, errBadRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, err.Error())
}

// newGRPCServer builds the provider's gRPC server over Discovery's
// options (the call tracking); Discovery registers the health service.
func newGRPCServer(opts []grpc.ServerOption, svc QuoteService) *grpc.Server {
	s := grpc.NewServer(opts...)
	quotegrpc.Register(s, grpcQuotes{svc: svc})
	return s
}
