// Command plainprovider is the HTTP quickstart provider in plain Go, no fx:
// it serves GET /quote, registers in ZooKeeper once ready, and at SIGTERM
// or Ctrl-C stops without failing a request (readiness, status,
// registration, flush, quiesce, serve, listen, session: docs/STOP.md).
// With GRACEKIT_FLUSH_GATEWAYS and GRACEKIT_FLUSH_SECRET it flushes the
// instances of those gateway services as it stops.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "plainprovider:", err)
		os.Exit(1)
	}
}

func run() (err error) {
	servers, service, address := os.Getenv("GRACEKIT_ZK_SERVERS"), os.Getenv("GRACEKIT_SERVICE"), os.Getenv("GRACEKIT_ADDRESS")
	port, perr := strconv.Atoi(os.Getenv("GRACEKIT_PORT"))
	if servers == "" || service == "" || address == "" || perr != nil {
		return errors.New("set GRACEKIT_ZK_SERVERS, GRACEKIT_SERVICE, GRACEKIT_ADDRESS and GRACEKIT_PORT " +
			"(for a local try: GRACEKIT_ZK_SERVERS=127.0.0.1:2181 GRACEKIT_SERVICE=quote GRACEKIT_ADDRESS=127.0.0.1 GRACEKIT_PORT=8080)")
	}
	log := slog.Default()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /quote", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"symbol": r.URL.Query().Get("symbol"), "price": 12.34})
	})
	sess, err := sd.NewSession(servers, sd.Logger(log)) // no I/O yet
	if err != nil {
		return err
	}
	cfg := provider.Config{
		Instance: sd.Instance{Name: service, Address: address, Port: port}, // no ID: a random UUID
		Server:   &http.Server{Addr: ":" + strconv.Itoa(port), Handler: mux, ReadHeaderTimeout: 5 * time.Second},
	}
	opts := []provider.Option{provider.WithLogger(log)}
	var gateways *consumer.Consumer // finds the gateways to flush, on the same session
	if names := os.Getenv("GRACEKIT_FLUSH_GATEWAYS"); names != "" {
		cfg.Flush = provider.Flush{Secret: []byte(os.Getenv("GRACEKIT_FLUSH_SECRET")), Gateways: strings.Split(names, ",")}
		if gateways, err = consumer.New(sess, consumer.WithLogger(log)); err != nil {
			return err
		}
		opts = append(opts, provider.WithConsumer(gateways))
	}
	// Checks cfg and wraps the handler (/readyz, /livez, the drain's
	// count); no I/O.
	p, err := provider.New(sess, cfg, opts...)
	if err != nil {
		return err
	}

	// A signal that arrives during the start stops the provider once started.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(signals)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if gateways != nil {
		if err := gateways.Start(ctx); err != nil { // before the provider, stopped after it
			return err
		}
		defer func() {
			stopCtx, stopCancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer stopCancel()
			if serr := gateways.Stop(stopCtx); serr != nil && err == nil {
				err = serr
			}
		}()
	}
	// Connects, listens, serves, registers, turns ready; a failed start
	// undoes itself.
	if err := p.Start(ctx); err != nil {
		return err
	}

	sig := "SIGTERM"
	if <-signals == os.Interrupt {
		sig = "SIGINT"
	}
	log.Info("signal received; stopping", "signal", sig)
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer stopCancel()
	return p.Stop(stopCtx) // the whole stop; its last line is "stop done"
}
