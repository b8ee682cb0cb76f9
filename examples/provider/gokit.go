package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	kitzk "github.com/go-kit/kit/sd/zk"
	kitlog "github.com/go-kit/log"

	"github.com/gracekit/gracekit/examples/internal/zktls"
	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/sd"
)

// goKitLinger is how long a go-kit provider keeps serving after its node
// went: the fixed sleep teams put there, since go-kit has no flush.
const goKitLinger = time.Second

// runGoKit serves the service the way a go-kit team runs it today, for the
// migrate scenario: registered with go-kit's sd/zk Registrar (a protected
// ephemeral sequential node under <base path>/<service> whose data is
// "address:port"), and at SIGTERM: close the session (go-kit's
// Deregister deletes the service's node, not its own, and fails while
// others are in it), keep serving for goKitLinger, shut the server down.
func runGoKit(cfg fxmodule.Config, svc *quoteService, log *slog.Logger, sigs chan os.Signal) error {
	servers, chroot, err := sd.ParseConnectString(cfg.ZKServers)
	if err != nil {
		return err
	}
	if chroot != "" {
		return fmt.Errorf("-mode gokit: go-kit's sd/zk takes no chroot (%s)", cfg.ZKServers)
	}
	base := cfg.BasePath
	if base == "" {
		base = sd.DefaultBasePath
	}
	if cfg.Port < 1 || cfg.Port > 65535 || cfg.Service == "" || cfg.Address == "" {
		return fmt.Errorf("-mode gokit needs %s, %s and %s", fxmodule.EnvService, fxmodule.EnvAddress, fxmodule.EnvPort)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(cfg.Port)))
	if err != nil {
		return err
	}
	// The driver's probes: go-kit has none of its own.
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }
	mux.HandleFunc("/readyz", ok)
	mux.HandleFunc("/livez", ok)
	mux.Handle("/", newHandler(svc))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	klog := kitlog.With(kitlog.NewLogfmtLogger(kitlog.NewSyncWriter(os.Stderr)), "app", "provider", "mode", "gokit")
	// GRACEKIT_ZK_TLS_*: through an in-process tunnel, as go-kit's client
	// takes no dialer.
	servers, stopTunnel, err := zktls.ForGoKit(cfg, servers)
	if err != nil {
		_ = srv.Close()
		return err
	}
	defer stopTunnel()
	client, err := kitzk.NewClient(servers, klog)
	if err != nil {
		_ = srv.Close()
		return err
	}
	data := net.JoinHostPort(cfg.Address, strconv.Itoa(cfg.Port))
	kitzk.NewRegistrar(client, kitzk.Service{Path: base, Name: cfg.Service, Data: []byte(data)}, klog).Register()
	log.Info("serving", "transport", "http", "port", cfg.Port, "instance", cfg.InstanceID, "registered", "go-kit sd/zk")

	sig := <-sigs
	begin := time.Now()
	log.Info("stopping", "signal", sig.String())
	client.Stop() // the session ends and the ephemeral node with it
	time.Sleep(goKitLinger)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Error("shutdown", "err", err)
	}
	<-served
	b, err := json.Marshal(StopReport{Mode: "gokit", DurationMS: math.Round(float64(time.Since(begin).Microseconds())/100) / 10})
	if err != nil {
		return err
	}
	fmt.Printf("STOPREPORT %s\n", b)
	return nil
}
