package fxmodule_test

import (
	"fmt"
	"net/http"
	"os"

	"go.uber.org/fx"

	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/shutdown"
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

// Adding Discovery to an fx app: a Config, the app's *http.Server, and
// one fx.Invoke.
func ExampleDiscovery() {
	app := fx.New(
		fx.Provide(fxmodule.ConfigFromEnv),
		fx.Provide(func() *http.Server {
			mux := http.NewServeMux()
			mux.HandleFunc("/hello", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
			return &http.Server{Handler: mux}
		}),
		fxmodule.Discovery,
		fx.Invoke(func(*shutdown.Sequence) {}),
	)
	app.Run() // start, wait for SIGTERM or SIGINT, stop
}
