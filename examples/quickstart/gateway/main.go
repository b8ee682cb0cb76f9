// Command gateway routes GET /price?symbol= to the "quote" service through
// gracekit's discovery, balancer and retries, and is registered so that
// stopping providers flush it: they leave its rotation at once.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	"go.uber.org/fx"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/fxmodule"
)

// newHTTPServer builds the quote endpoint in a start hook: the consumer is
// connected by then, and the server does not serve yet.
func newHTTPServer(lc fx.Lifecycle, c *consumer.Consumer) (*http.Server, error) {
	f, err := endpoint.NewHTTPFactory(http.MethodGet, "/quote", encodeSymbol, decodeJSON)
	if err != nil {
		return nil, err
	}
	var quote kitendpoint.Endpoint
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) (err error) {
			quote, err = c.Endpoint(ctx, "quote", f.Factory, consumer.WithRetry(endpoint.Attempts(3)))
			return err
		},
		OnStop: func(context.Context) error { return f.Close() },
	})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /price", func(w http.ResponseWriter, r *http.Request) {
		resp, err := quote(r.Context(), r.URL.Query().Get("symbol"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	})
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, nil
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

func main() {
	app := fx.New(
		fxmodule.Logger,    // fx's own events at debug: the first line you see is what matters
		fxmodule.FromEnv(), // GRACEKIT_FLUSH_SECRET too: providers sign their flushes with it
		fx.Provide(newHTTPServer),
		fxmodule.Discovery, // registers the gateway with its flush path, so providers find it
		fxmodule.Gateway,   // the consumer, and the flush handler at /gracekit/flush
	)
	if err := app.Err(); err != nil { // a setting unset or wrong: said once, plainly
		fmt.Fprintln(os.Stderr, "gateway:", fxmodule.Cause(err))
		os.Exit(1)
	}
	app.Run()
}
