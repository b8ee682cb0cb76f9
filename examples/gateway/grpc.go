package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitsd "github.com/go-kit/kit/sd"
	kitgrpc "github.com/go-kit/kit/transport/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/health" // client health checking (healthCheckConfig)
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/endpoint/grpcfactory"
	"github.com/gracekit/gracekit/examples/internal/gwrun"
	"github.com/gracekit/gracekit/examples/internal/quotegrpc"
	"github.com/gracekit/gracekit/examples/internal/zktls"
	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/grpcresolver"
	"github.com/gracekit/gracekit/sd"
)

// serviceConfig is grpcresolver's documented client setup: round robin
// over every instance, each subchannel watching the standard health
// service, so that an instance leaves rotation at its stop's first step.
const serviceConfig = `{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":""}}`

// grpcMethod is one forwarded route over gRPC: the method and go-kit's
// encode func (the decode func is decodeStruct for both).
type grpcMethod struct {
	name string
	enc  kitgrpc.EncodeRequestFunc
}

var grpcMethods = []grpcMethod{
	{quotegrpc.MethodGet, func(_ context.Context, req any) (any, error) {
		return wrapperspb.String(req.(quoteRequest).Symbol), nil
	}},
	{quotegrpc.MethodPlaceOrder, func(_ context.Context, req any) (any, error) {
		var m map[string]any
		if err := json.Unmarshal(req.(orderRequest).Body, &m); err != nil {
			return nil, errBadRequest
		}
		return structpb.NewStruct(m)
	}},
}

// decodeStruct turns a reply into the JSON the gateway answers with.
func decodeStruct(_ context.Context, resp any) (any, error) {
	b, err := json.Marshal(resp.(*structpb.Struct).AsMap())
	return json.RawMessage(b), err
}

// orderKeyKey holds an order's idempotency key in the ctx of its call,
// for setKey, since go-kit's encode func cannot set metadata.
type orderKeyKey struct{}

// withOrderKey wraps a route's endpoint so that an order's key reaches
// setKey through the retries.
func withOrderKey(e kitendpoint.Endpoint) kitendpoint.Endpoint {
	return func(ctx context.Context, req any) (any, error) {
		if or, ok := req.(orderRequest); ok && or.Key != "" {
			ctx = context.WithValue(ctx, orderKeyKey{}, or.Key)
		}
		return e(ctx, req)
	}
}

// setKey is a go-kit ClientBefore that sends the order's key as metadata.
func setKey(ctx context.Context, md *metadata.MD) context.Context {
	if k, ok := ctx.Value(orderKeyKey{}).(string); ok {
		md.Set(quotegrpc.MetadataKey, k)
	}
	return ctx
}

// addrError names the provider a failed gRPC call went to, for the 502's
// "upstream".
type addrError struct {
	addr string
	err  error
}

func (e *addrError) Error() string { return "call " + e.addr + ": " + e.err.Error() }
func (e *addrError) Unwrap() error { return e.err }

// loopbackDialer refuses, before connecting, any address whose host is not
// a loopback IP address (GATEWAY_LOOPBACK_ONLY=1), for the resolver's
// connections, which no factory sees.
func loopbackDialer(ctx context.Context, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if !gwrun.IsLoopback(host) {
		return nil, fmt.Errorf("address %q is not a loopback address (GATEWAY_LOOPBACK_ONLY=1)", addr)
	}
	return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
}

// grpcFactories are gracekit's factories of the two routes, over
// endpoint/grpcfactory (one ClientConn per instance).
func grpcFactories(loopbackOnly bool) ([]kitsd.Factory, error) {
	var out []kitsd.Factory
	for _, m := range grpcMethods {
		f, err := grpcfactory.New(quotegrpc.ServiceName, m.name, m.enc, decodeStruct, new(structpb.Struct),
			grpcfactory.ClientOptions(kitgrpc.ClientBefore(setKey)))
		if err != nil {
			return nil, err
		}
		factory := kitsd.Factory(f.Factory)
		if loopbackOnly {
			factory = loopbackFactory(factory, uriHost)
		}
		out = append(out, factory)
	}
	return out, nil
}

// kitGRPCFactory is the factory go-kit documents for gRPC (its apigateway
// example), a ClientConn per instance, with one change: the io.Closer
// closes the ClientConn once the calls in flight on it have finished
// (drainCloser), where go-kit's example gives the ClientConn itself.
// go-kit's Endpointer calls it as soon as the instance leaves ZooKeeper,
// at the provider's deregistration, while the provider still serves
// (its drain comes later), and ClientConn.Close cancels the calls in
// flight: lb.Retry then sends each again, and an order runs twice
// (TestClientConnCloseCancelsCallsInFlight). No provider's stop can
// prevent that; the demo's go-kit gateway has the fix a go-kit user needs.
// The instance string is the node's Curator JSON (go-kit's sd/zk).
func kitGRPCFactory(m grpcMethod, loopbackOnly bool) kitsd.Factory {
	return func(instance string) (kitendpoint.Endpoint, io.Closer, error) {
		node, err := parseCuratorNode(instance)
		if err != nil {
			return nil, nil, err
		}
		if loopbackOnly && !gwrun.IsLoopback(node.Address) {
			return nil, nil, fmt.Errorf("instance address %q is not a loopback address (GATEWAY_LOOPBACK_ONLY=1): %.80q", node.Address, instance)
		}
		addr := net.JoinHostPort(node.Address, strconv.Itoa(*node.Port))
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, nil, err
		}
		e := kitgrpc.NewClient(cc, quotegrpc.ServiceName, m.name, m.enc, decodeStruct, new(structpb.Struct),
			kitgrpc.ClientBefore(setKey)).Endpoint()
		closer := &drainCloser{conn: cc, bound: drainBound}
		return func(ctx context.Context, req any) (any, error) {
			end := closer.begin()
			defer end()
			resp, err := e(ctx, req)
			if err != nil {
				return nil, &addrError{addr: addr, err: err}
			}
			return resp, nil
		}, closer, nil
	}
}

// drainBound is how long a drainCloser waits for the calls in flight.
const drainBound = 10 * time.Second

// drainCloser closes conn once no call begun on it is in flight, or after
// bound at the latest. Calls that begin after Close still run until then.
type drainCloser struct {
	conn  io.Closer
	bound time.Duration

	mu       sync.Mutex
	inFlight int
	closing  bool
	once     sync.Once
}

// begin counts a call in flight; the func it returns ends it.
func (c *drainCloser) begin() (end func()) {
	c.mu.Lock()
	c.inFlight++
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.inFlight--
		last := c.closing && c.inFlight == 0
		c.mu.Unlock()
		if last {
			c.closeConn()
		}
	}
}

// Close closes conn now when no call is in flight, else when the last one
// ends (or after bound). It does not wait: go-kit calls it while
// updating its cache.
func (c *drainCloser) Close() error {
	c.mu.Lock()
	c.closing = true
	idle := c.inFlight == 0
	c.mu.Unlock()
	if idle {
		c.closeConn()
	} else {
		time.AfterFunc(c.bound, c.closeConn)
	}
	return nil
}

func (c *drainCloser) closeConn() { c.once.Do(func() { _ = c.conn.Close() }) }

// runResolver is the gateway as a plain grpc-go client: one ClientConn to
// gracekit:///<upstream> through grpcresolver over a consumer.Consumer,
// round_robin and health checking (serviceConfig), no retries of its own.
// It does not register.
func runResolver(cfg fxmodule.Config, upstream string, loopbackOnly bool, m *metrics, log *slog.Logger, sigs chan os.Signal) error {
	if cfg.Port < 1 || cfg.Port > 65535 {
		return fmt.Errorf("invalid %s %d (a port from 1 to 65535)", fxmodule.EnvPort, cfg.Port)
	}
	basePath := cfg.BasePath
	if basePath == "" {
		basePath = sd.DefaultBasePath
	}
	sec, err := zktls.ClientOptions(cfg) // GRACEKIT_ZK_TLS_*, GRACEKIT_ZK_SASL_*
	if err != nil {
		return err
	}
	sess, err := sd.NewSession(cfg.ZKServers, append(sec, sd.Logger(log))...)
	if err != nil {
		return err
	}
	c, err := consumer.New(sess, consumer.WithLogger(log), consumer.WithInstancerOptions(sd.BasePath(basePath)))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	}()
	b, err := grpcresolver.NewBuilder(c, grpcresolver.WithLogger(log))
	if err != nil {
		return err
	}
	opts := []grpc.DialOption{grpc.WithResolvers(b), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig)}
	if loopbackOnly {
		opts = append(opts, grpc.WithContextDialer(loopbackDialer))
	}
	cc, err := grpc.NewClient(b.Scheme()+":///"+upstream, opts...)
	if err != nil {
		return err
	}
	defer cc.Close()
	quote := func(ctx context.Context, req any) (any, error) {
		var p peer.Peer
		resp, err := quotegrpc.Get(ctx, cc, req.(quoteRequest).Symbol, grpc.Peer(&p))
		return peerResult(resp, err, &p)
	}
	order := func(ctx context.Context, req any) (any, error) {
		or := req.(orderRequest)
		var body map[string]any
		if err := json.Unmarshal(or.Body, &body); err != nil {
			return nil, errBadRequest
		}
		s, err := structpb.NewStruct(body)
		if err != nil {
			return nil, errBadRequest
		}
		var p peer.Peer
		resp, err := quotegrpc.PlaceOrder(ctx, cc, s, or.Key, grpc.Peer(&p))
		return peerResult(resp, err, &p)
	}
	return serveNaive(cfg.Port, newMux(quote, order, m), log, sigs, "upstream", "gracekit:///"+upstream, "loopback_only", loopbackOnly)
}

// peerResult decodes a reply, or names the peer of a failed call.
func peerResult(resp *structpb.Struct, err error, p *peer.Peer) (any, error) {
	if err != nil {
		if p.Addr != nil {
			return nil, &addrError{addr: p.Addr.String(), err: err}
		}
		return nil, err
	}
	return decodeStruct(context.Background(), resp)
}

// upstreamAddr is the provider a failed gRPC call went to, "" if unknown.
func upstreamAddr(err error) string {
	var ae *addrError
	if errors.As(err, &ae) {
		return ae.addr
	}
	return ""
}
