package fxmodule_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kithttp "github.com/go-kit/kit/transport/http"
	"go.uber.org/fx"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/provider"
)

// A provider reads its Config from the environment.
func ExampleConfigFromEnv() {
	for k, v := range map[string]string{
		"GRACEKIT_ZK_SERVERS":     "zk1:2181,zk2:2181/apps",
		"GRACEKIT_SERVICE":        "quote",
		"GRACEKIT_INSTANCE_ID":    "quote-1",
		"GRACEKIT_ADDRESS":        "10.0.0.7",
		"GRACEKIT_PORT":           "8080",
		"GRACEKIT_FLUSH_GATEWAYS": "gateway, edge",
		"GRACEKIT_MAX_QUIESCE":    "3s",
	} {
		os.Setenv(k, v)
		defer os.Unsetenv(k)
	}
	cfg, err := fxmodule.ConfigFromEnv()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.ZKServers, cfg.Service, cfg.InstanceID, cfg.Address, cfg.Port)
	fmt.Println(cfg.FlushGateways, cfg.MaxQuiesce, cfg.StopTimeout == 0)
	// Output:
	// zk1:2181,zk2:2181/apps quote quote-1 10.0.0.7 8080
	// [gateway edge] 3s true
}

// Adding Discovery to an fx app: a Config and the app's *http.Server. The
// module invokes itself; fx.Populate keeps the provider for its Report.
func ExampleDiscovery() {
	var p *provider.Provider
	app := fx.New(
		fxmodule.FromEnv(),
		fx.Provide(func() *http.Server {
			mux := http.NewServeMux()
			mux.HandleFunc("/hello", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
			return &http.Server{Handler: mux}
		}),
		fxmodule.Discovery,
		fx.Populate(&p),
	)
	app.Run() // start, wait for SIGTERM or SIGINT, stop
	fmt.Println(p.Report().Err)
}

// A service that serves and calls another: Discovery and Consumer share one
// ZooKeeper session. Endpoints are built in an OnStart hook appended by the
// server's constructor, which runs after the consumer's (it connects) and
// before the provider's (it serves).
func ExampleConsumer() {
	server := func(lc fx.Lifecycle, c *consumer.Consumer) (*http.Server, error) {
		f, err := endpoint.NewHTTPFactory(http.MethodGet, "/quote", kithttp.EncodeJSONRequest, decodeQuote)
		if err != nil {
			return nil, err
		}
		var quote kitendpoint.Endpoint
		lc.Append(fx.Hook{
			OnStart: func(ctx context.Context) (err error) {
				quote, err = c.Endpoint(ctx, "quote", f.Factory, consumer.WithBalancer(consumer.P2C))
				return err
			},
			OnStop: func(context.Context) error { return f.Close() },
		})
		mux := http.NewServeMux()
		mux.HandleFunc("/price", func(w http.ResponseWriter, r *http.Request) {
			resp, err := quote(r.Context(), r.URL.Query().Get("symbol"))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			fmt.Fprintln(w, resp)
		})
		return &http.Server{Handler: mux}, nil
	}
	fx.New(
		fxmodule.FromEnv(),
		fx.Provide(server),
		fxmodule.Discovery,
		fxmodule.Consumer,
	).Run()
}

func decodeQuote(_ context.Context, r *http.Response) (any, error) {
	b, err := io.ReadAll(r.Body)
	return string(b), err
}
