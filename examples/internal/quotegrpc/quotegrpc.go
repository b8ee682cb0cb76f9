// Package quotegrpc is the demo's gRPC "quote" service, written by hand
// over well-known messages so that the examples need no generated code:
//
//	gracekit.example.Quotes/Get         StringValue (the symbol) -> Struct {symbol, price, instance}
//	gracekit.example.Quotes/PlaceOrder  Struct {symbol, qty}     -> Struct {order_id, instance}
//
// An order carries its idempotency key in the request metadata under
// MetadataKey (examples/CONTRACT.md, "Orders and the ledger").
package quotegrpc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// ServiceName is the full name of the service.
const ServiceName = "gracekit.example.Quotes"

// Method names and their full names.
const (
	MethodGet        = "Get"
	MethodPlaceOrder = "PlaceOrder"
	FullGet          = "/" + ServiceName + "/" + MethodGet
	FullPlaceOrder   = "/" + ServiceName + "/" + MethodPlaceOrder
)

// MetadataKey is the request metadata key of an order's idempotency key.
// gRPC has no transport that replays a call by itself, unlike Go's
// http.Transport with Idempotency-Key, so the key keeps its own name.
const MetadataKey = "idempotency-key"

// Server is what a provider implements.
type Server interface {
	Get(ctx context.Context, symbol string) (*structpb.Struct, error)
	// PlaceOrder gets the key from the request metadata (KeyFrom).
	PlaceOrder(ctx context.Context, order *structpb.Struct) (*structpb.Struct, error)
}

// Register registers impl on s.
func Register(s grpc.ServiceRegistrar, impl Server) { s.RegisterService(&serviceDesc, impl) }

// KeyFrom returns the idempotency key of an incoming call, "" when none.
func KeyFrom(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, MetadataKey); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Get calls Quotes/Get on cc.
func Get(ctx context.Context, cc grpc.ClientConnInterface, symbol string, opts ...grpc.CallOption) (*structpb.Struct, error) {
	out := new(structpb.Struct)
	if err := cc.Invoke(ctx, FullGet, wrapperspb.String(symbol), out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}

// PlaceOrder calls Quotes/PlaceOrder on cc with key ("" for none) in the
// metadata.
func PlaceOrder(ctx context.Context, cc grpc.ClientConnInterface, order *structpb.Struct, key string, opts ...grpc.CallOption) (*structpb.Struct, error) {
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, MetadataKey, key)
	}
	out := new(structpb.Struct)
	if err := cc.Invoke(ctx, FullPlaceOrder, order, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*Server)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: MethodGet, Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			call := func(ctx context.Context, req any) (any, error) {
				return srv.(Server).Get(ctx, req.(*wrapperspb.StringValue).GetValue())
			}
			if icpt == nil {
				return call(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: FullGet}, call)
		}},
		{MethodName: MethodPlaceOrder, Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(structpb.Struct)
			if err := dec(in); err != nil {
				return nil, err
			}
			call := func(ctx context.Context, req any) (any, error) {
				return srv.(Server).PlaceOrder(ctx, req.(*structpb.Struct))
			}
			if icpt == nil {
				return call(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: FullPlaceOrder}, call)
		}},
	},
}
