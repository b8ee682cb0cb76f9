// Command provider is an HTTP service registered in ZooKeeper: it serves
// GET /quote, registers when ready, and on SIGTERM leaves without failing a
// request (unready, out of service, deregister, flush, quiesce, drain).
package main

import (
	"encoding/json"
	"net/http"
	"time"

	"go.uber.org/fx"

	"github.com/gracekit/gracekit/fxmodule"
)

func newHTTPServer() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /quote", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"symbol": r.URL.Query().Get("symbol"), "price": 12.34})
	})
	// No Addr: Discovery listens on GRACEKIT_PORT, the port it registers.
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

func main() {
	fx.New(
		fxmodule.FromEnv(),        // the GRACEKIT_* variables; or fx.Supply(fxmodule.Config{...})
		fx.Provide(newHTTPServer), // your *http.Server
		fxmodule.Discovery,        // serves it, registers it, runs the stop at SIGTERM
	).Run()
}
