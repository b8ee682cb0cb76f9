// Command byhand calls the "quote" service once from parts composed in
// plain Go, no fx: a ZooKeeper client, an Instancer, an HTTP factory, an
// Endpointer, a balancer and a retry. Each is the go-kit interface of the
// same name, so it mixes with go-kit's own sd.NewEndpointer or lb.Retry.
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

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/sd"
)

func main() {
	if err := run(os.Getenv("GRACEKIT_ZK_SERVERS")); err != nil {
		fmt.Fprintln(os.Stderr, "byhand:", err)
		os.Exit(1)
	}
}

func run(servers string) error {
	if servers == "" {
		return fmt.Errorf("set GRACEKIT_ZK_SERVERS to the ZooKeeper connect string, e.g. 127.0.0.1:2181")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := sd.NewClient(servers, sd.Logger(slog.Default()))
	if err != nil {
		return err
	}
	defer client.Close()
	instancer, err := sd.NewInstancerContext(ctx, client, "quote") // waits for the first load
	if err != nil {
		return err
	}
	defer instancer.Stop()
	factory, err := endpoint.NewHTTPFactory(http.MethodGet, "/quote", encodeSymbol, decodeJSON)
	if err != nil {
		return err
	}
	defer factory.Close()
	endpointer, err := endpoint.NewEndpointer(instancer, factory.Factory)
	if err != nil {
		return err
	}
	defer endpointer.Close()
	balancer, err := endpoint.NewRoundRobin(endpointer)
	if err != nil {
		return err
	}
	call, err := endpoint.NewRetry(balancer, endpoint.Attempts(3))
	if err != nil {
		return err
	}
	quote, err := call(ctx, "ABC")
	if err != nil {
		return err
	}
	fmt.Println(quote)
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
