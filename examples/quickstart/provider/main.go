// Command provider is an HTTP service registered in ZooKeeper: it serves
// GET /quote, registers when ready, and on SIGTERM leaves without failing a
// request (unready, out of service, deregister, flush, quiesce, drain).
package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
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
	app := fx.New(
		fxmodule.Logger,           // fx's own events at debug: the first line you see is what matters
		fxmodule.FromEnv(),        // the GRACEKIT_* variables; or fx.Supply(fxmodule.Config{...})
		fx.Provide(newHTTPServer), // your *http.Server
		fxmodule.Discovery,        // serves it, registers it, runs the stop at SIGTERM
	)
	if err := app.Err(); err != nil { // a setting unset or wrong: said once, plainly
		fmt.Fprintln(os.Stderr, "provider:", fxmodule.Cause(err))
		os.Exit(1)
	}
	app.Run()
}
