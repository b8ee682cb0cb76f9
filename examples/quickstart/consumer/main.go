// Command consumer calls the HTTP quickstart's "quote" service through a
// retrying endpoint and the gRPC quickstart's "quote-grpc" service through
// a grpc-go ClientConn, both over one ZooKeeper session, in plain Go (no
// fx). Start order: session and consumer, then the endpoint and the
// ClientConn; stop order: the ClientConn, then the consumer, which gives
// the session back.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/health" // client health checks for healthCheckConfig
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/grpcresolver"
	"github.com/gracekit/gracekit/sd"
)

func main() {
	if err := run(os.Getenv("GRACEKIT_ZK_SERVERS")); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func run(servers string) (err error) {
	if servers == "" {
		return fmt.Errorf("set GRACEKIT_ZK_SERVERS to the ZooKeeper connect string, e.g. 127.0.0.1:2181")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	sess, err := sd.NewSession(servers, sd.Logger(slog.Default())) // no I/O yet
	if err != nil {
		return err
	}
	c, err := consumer.New(sess, consumer.WithLogger(slog.Default())) // logs each change of a service's instances
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil { // takes a share of the session: connects
		return err
	}
	defer func() {
		// Last: after the ClientConn closed (deferred below, so it runs first).
		stopCtx, stopCancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer stopCancel()
		if serr := c.Stop(stopCtx); serr != nil && err == nil {
			err = serr
		}
	}()

	// HTTP: GET /quote on an instance of "quote", three attempts, each on
	// another instance when there is one.
	factory, err := endpoint.NewHTTPFactory(http.MethodGet, "/quote", encodeSymbol, decodeJSON)
	if err != nil {
		return err
	}
	defer factory.Close()
	getQuote, err := c.Endpoint(ctx, "quote", factory.Factory, consumer.WithRetry(endpoint.Attempts(3)))
	if err != nil {
		return err
	}
	quote, err := getQuote(ctx, "ABC")
	if err != nil {
		return fmt.Errorf("quote over HTTP: %w", err)
	}
	fmt.Println("http:", quote)

	// gRPC: a ClientConn over the instances of "quote-grpc", round robin,
	// each subchannel following the server's health service.
	b, err := grpcresolver.NewBuilder(c)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient("gracekit:///quote-grpc",
		grpc.WithResolvers(b),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":""}}`))
	if err != nil {
		return err
	}
	defer conn.Close()
	price := new(wrapperspb.DoubleValue)
	if err := conn.Invoke(ctx, "/quote.Quotes/Get", wrapperspb.String("ABC"), price, grpc.WaitForReady(true)); err != nil {
		return fmt.Errorf("quote over gRPC: %w", err)
	}
	fmt.Println("grpc:", price.GetValue())
	return nil
}

// encodeSymbol sends the request, a symbol, in the query string.
func encodeSymbol(_ context.Context, r *http.Request, symbol any) error {
	r.URL.RawQuery = url.Values{"symbol": {symbol.(string)}}.Encode()
	return nil
}

func decodeJSON(_ context.Context, r *http.Response) (any, error) {
	var quote map[string]any
	err := json.NewDecoder(r.Body).Decode(&quote)
	return quote, err
}
