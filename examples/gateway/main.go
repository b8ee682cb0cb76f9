// Command gateway is the demo's HTTP gateway in front of the "quote"
// providers:
//
//	GET  /api/quote?symbol=ABC  forwarded to GET /quote
//	POST /api/orders            forwarded to POST /orders (non-idempotent)
//	/metrics                    Prometheus: gateway_requests_total,
//	                            gateway_failures_total, gateway_retries_total,
//	                            and in graceful mode gracekit's own metrics
//	                            (lifecycle, discovery, flush, retries and
//	                            ejections by reason; see the README)
//	/readyz
//
// An order's Idempotency-Key header is passed on to the provider as
// Order-Key (see examples/CONTRACT.md for why not under its own name).
//
// A call that gets no answer from a provider is answered 502 with a JSON
// error. Configuration is the fxmodule environment variables (GRACEKIT_*:
// its own registration), plus GATEWAY_UPSTREAM, the providers' service name
// (default quote), and GATEWAY_LOOPBACK_ONLY: when it is 1, instances whose
// address is not a loopback IP address are refused (never called), which
// the demo sets so that it can only ever send its load to its own processes,
// and GATEWAY_GOKIT_NODES: when it is 1, the upstream's providers registered
// with go-kit's sd/zk or as their twins (make demo's migrate scenario): the
// naive gateway takes host:port instance strings, the graceful one reads
// the service with sd.MixedCodec.
//
// With -mode graceful (the default) it uses fxmodule.Discovery and
// fxmodule.Gateway: gracekit's Instancer, Endpointer, RoundRobin and Retry
// (consumer.Consumer), the flush handler at /gracekit/flush, and its own
// registration in ZooKeeper with that path.
// With -mode naive it uses go-kit's stock sd/zk Instancer over
// <base path>/<upstream> (GRACEKIT_BASE_PATH, default /services),
// sd.NewEndpointer, lb.NewRoundRobin and lb.Retry(3, 2s, rr), as go-kit
// documents them, and does not register; go-kit's client takes no dialer,
// so with GRACEKIT_ZK_TLS_* it reaches the secureClientPort through an
// in-process TLS tunnel (zktls.ForGoKit).
// With -transport grpc the providers are gRPC ones (examples/provider
// -transport grpc, examples/internal/quotegrpc), called with the order's
// key in the idempotency-key metadata: graceful mode builds the endpoints
// with endpoint/grpcfactory; naive mode uses go-kit's transport/grpc with
// the factory go-kit documents (a ClientConn per instance), whose
// io.Closer waits for the calls in flight (see kitGRPCFactory); -mode resolver is a plain grpc-go client, one ClientConn to
// gracekit:///<upstream> through grpcresolver (over a consumer.Consumer)
// with round_robin and health checking and no retries of its own, and
// does not register. A failed call's 502 names the provider it went to.
// It stops on SIGTERM or SIGINT; a second signal kills it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitsd "github.com/go-kit/kit/sd"
	kitlb "github.com/go-kit/kit/sd/lb"
	kitzk "github.com/go-kit/kit/sd/zk"
	kithttp "github.com/go-kit/kit/transport/http"
	kitlog "github.com/go-kit/log"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/examples/internal/gwrun"
	"github.com/gracekit/gracekit/examples/internal/zktls"
	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/sd"
)

func main() {
	mode := flag.String("mode", "graceful", "gateway stack: graceful (gracekit), naive (go-kit sd/zk) or, with -transport grpc, resolver (grpc-go over grpcresolver)")
	transport := flag.String("transport", "http", "the providers' transport: http or grpc")
	flag.Parse()
	if err := run(*mode, *transport); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run(mode, transport string) error {
	switch {
	case transport != "http" && transport != "grpc":
		return fmt.Errorf("invalid -transport %q (http or grpc)", transport)
	case mode == "resolver" && transport != "grpc":
		return fmt.Errorf("-mode resolver needs -transport grpc")
	case mode != "graceful" && mode != "naive" && mode != "resolver":
		return fmt.Errorf("invalid -mode %q (graceful, naive, or resolver with -transport grpc)", mode)
	}
	cfg, err := fxmodule.ConfigFromEnv()
	if err != nil {
		return err
	}
	upstream := gwrun.Upstream()
	loopbackOnly, err := gwrun.LoopbackOnly()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).
		With("app", "gateway", "mode", mode, "transport", transport, "self", cfg.InstanceID)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	m := newMetrics(mode)
	switch mode {
	case "resolver":
		return runResolver(cfg, upstream, loopbackOnly, m, log, sigs)
	case "naive":
		var factories []kitsd.Factory
		if transport == "grpc" {
			for _, gm := range grpcMethods {
				factories = append(factories, kitGRPCFactory(gm, loopbackOnly))
			}
		} else {
			// GATEWAY_GOKIT_NODES=1: the providers registered the go-kit
			// way (the migrate scenario), so the instance string is
			// host:port, and the Curator JSON beside it is refused.
			gokit := os.Getenv("GATEWAY_GOKIT_NODES") == "1"
			for _, r := range []route{quoteRoute, orderRoute} {
				factory, hostOf := curatorFactory(r), curatorHost
				if gokit {
					factory, hostOf = hostPortFactory(r), hostPortHost
				}
				if loopbackOnly {
					factory = loopbackFactory(factory, hostOf)
				}
				factories = append(factories, factory)
			}
		}
		return runNaive(cfg, upstream, factories, m, log, sigs)
	}
	if transport == "grpc" {
		factories, err := grpcFactories(loopbackOnly)
		if err != nil {
			return err
		}
		return runGraceful(cfg, upstream, factories, withOrderKey, m, log, sigs)
	}
	var factories []kitsd.Factory
	var closers []io.Closer
	for _, r := range []route{quoteRoute, orderRoute} {
		f, err := endpoint.NewHTTPFactory(r.method, r.path, r.enc, decodeUpstream)
		if err != nil {
			return err
		}
		closers = append(closers, f)
		factory := kitsd.Factory(f.Factory)
		if loopbackOnly {
			factory = loopbackFactory(factory, uriHost)
		}
		factories = append(factories, factory)
	}
	defer func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}()
	return runGraceful(cfg, upstream, factories, nil, m, log, sigs)
}

// waitSignal returns the first SIGTERM or SIGINT and stops relaying them,
// so that a second one kills the process.
func waitSignal(sigs chan os.Signal) os.Signal {
	sig := <-sigs
	signal.Stop(sigs)
	return sig
}

// readGoKit is fxmodule.ReadGoKitNodes with GATEWAY_GOKIT_NODES=1: the
// upstream's providers are mixed, go-kit's and gracekit's (the migrate
// scenario).
func readGoKit() fx.Option {
	if os.Getenv("GATEWAY_GOKIT_NODES") == "1" {
		return fxmodule.ReadGoKitNodes()
	}
	return fx.Options()
}

// runGraceful serves the quote and order routes through gracekit's
// consumer over factories (one per route); wrap, if set, wraps each
// route's endpoint.
func runGraceful(cfg fxmodule.Config, upstream string, factories []kitsd.Factory, wrap kitendpoint.Middleware, m *metrics, log *slog.Logger, sigs chan os.Signal) error {
	stopTimeout := cfg.StopTimeout
	if stopTimeout == 0 {
		stopTimeout = fxmodule.DefaultStopTimeout
	}
	app := fx.New(
		fx.WithLogger(func() fxevent.Logger {
			l := &fxevent.SlogLogger{Logger: log}
			l.UseLogLevel(slog.LevelDebug)
			return l
		}),
		fxmodule.StopTimeout(stopTimeout), // fx's stop timeout and the module's budget at once
		fx.Supply(cfg, log, m.gracekit),
		fx.Provide(func(lc fx.Lifecycle, c *consumer.Consumer) (*http.Server, error) {
			// The endpoints are built in a start hook, once the consumer
			// is connected (its hook was appended first, as it was built
			// first) and before Discovery serves (its hook comes after,
			// as it is built from this server).
			calls := make([]kitendpoint.Endpoint, 2)
			for i, r := range []route{quoteRoute, orderRoute} {
				factory := factories[i]
				name := routeName(r)
				lc.Append(fx.StartHook(func(ctx context.Context) (err error) {
					calls[i], err = c.Endpoint(ctx, upstream, counted(factory),
						consumer.WithRetry(append(m.endpoint.RetryOptions(name), endpoint.Attempts(3), endpoint.AttemptTimeout(2*time.Second))...),
						consumer.WithEndpointer(m.endpoint.EndpointerOptions(name)...))
					return err
				}))
			}
			call := func(i int) kitendpoint.Endpoint {
				e := kitendpoint.Endpoint(func(ctx context.Context, req any) (any, error) { return calls[i](ctx, req) })
				if wrap != nil {
					e = wrap(e)
				}
				return e
			}
			return &http.Server{Handler: newMux(call(0), call(1), m), ReadHeaderTimeout: 5 * time.Second}, nil
		}),
		fxmodule.Discovery, // registers the gateway and serves it, its flush handler included
		fxmodule.Gateway,   // the consumer and the flush handler
		readGoKit(),
	)
	startCtx, cancel := context.WithTimeout(context.Background(), fx.DefaultTimeout)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		return err
	}
	log.Info("serving", "port", cfg.Port, "upstream", upstream)
	sig := waitSignal(sigs)
	log.Info("stopping", "signal", sig.String())
	stopCtx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	return app.Stop(stopCtx)
}

// runNaive is the gateway as go-kit documents it: sd/zk Instancer,
// sd.NewEndpointer, lb.NewRoundRobin, lb.Retry.
// factories are one per route (quote, orders), over the instance strings
// go-kit's sd/zk publishes: the nodes' data.
func runNaive(cfg fxmodule.Config, upstream string, factories []kitsd.Factory, m *metrics, log *slog.Logger, sigs chan os.Signal) error {
	servers, chroot, err := sd.ParseConnectString(cfg.ZKServers)
	if err != nil {
		return err
	}
	basePath := cfg.BasePath
	if basePath == "" {
		basePath = sd.DefaultBasePath
	} else if !strings.HasPrefix(basePath, "/") || strings.HasSuffix(basePath, "/") {
		return fmt.Errorf("invalid %s %q (an absolute ZooKeeper path such as /services)", fxmodule.EnvBasePath, basePath)
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return fmt.Errorf("invalid %s %d (a port from 1 to 65535)", fxmodule.EnvPort, cfg.Port)
	}
	klog := kitlog.NewLogfmtLogger(kitlog.NewSyncWriter(os.Stderr))
	klog = kitlog.With(klog, "app", "gateway", "mode", "naive")
	// GRACEKIT_ZK_TLS_*: go-kit's client takes no dialer, so it reaches a
	// secureClientPort through an in-process tunnel.
	servers, stopTunnel, err := zktls.ForGoKit(cfg, servers)
	if err != nil {
		return err
	}
	defer stopTunnel()
	client, err := kitzk.NewClient(servers, klog)
	if err != nil {
		return err
	}
	defer client.Stop()
	instancer, err := kitzk.NewInstancer(client, chroot+basePath+"/"+upstream, klog)
	if err != nil {
		return err
	}
	defer instancer.Stop()

	var calls []kitendpoint.Endpoint
	for _, factory := range factories {
		endpointer := kitsd.NewEndpointer(instancer, counted(factory), klog)
		defer endpointer.Close()
		calls = append(calls, withOrderKey(kitlb.Retry(3, 2*time.Second, kitlb.NewRoundRobin(endpointer))))
	}
	return serveNaive(cfg.Port, newMux(calls[0], calls[1], m), log, sigs, "upstream", upstream, "path", chroot+basePath+"/"+upstream)
}

// serveNaive serves mux with /readyz and /livez on port until a signal;
// kv are logged.
func serveNaive(port int, mux *http.ServeMux, log *slog.Logger, sigs chan os.Signal, kv ...any) error {
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served, err := gwrun.Listen(srv, port)
	if err != nil {
		return err
	}
	log.Info("serving", append([]any{"port", port}, kv...)...)
	return served.Wait(sigs, log)
}

// curatorNode is the part of a Curator instance node the naive gateway reads.
type curatorNode struct {
	Address string `json:"address"`
	Port    *int   `json:"port"`
}

func parseCuratorNode(instance string) (curatorNode, error) {
	var node curatorNode
	if err := json.Unmarshal([]byte(instance), &node); err != nil || node.Address == "" || node.Port == nil {
		return node, fmt.Errorf("not a Curator instance node: %.80q", instance)
	}
	return node, nil
}

// curatorHost is the address of a Curator instance node.
func curatorHost(instance string) (string, error) {
	node, err := parseCuratorNode(instance)
	return node.Address, err
}

// uriHost is the host of a gracekit instance string: "host:port" or a URI
// such as "http://host:port".
func uriHost(instance string) (string, error) {
	if strings.Contains(instance, "://") {
		u, err := url.Parse(instance)
		if err != nil {
			return "", err
		}
		if u.Hostname() == "" {
			return "", fmt.Errorf("instance %q has no host", instance)
		}
		return u.Hostname(), nil
	}
	host, _, err := net.SplitHostPort(instance)
	return host, err
}

// loopbackFactory wraps f so that it refuses, with an error (go-kit's
// Endpointer then leaves the instance out), every instance whose host is
// not a loopback IP address. Host names, "localhost" included, are refused:
// what they resolve to is not the gateway's to check.
func loopbackFactory(f kitsd.Factory, hostOf func(instance string) (string, error)) kitsd.Factory {
	return func(instance string) (kitendpoint.Endpoint, io.Closer, error) {
		host, err := hostOf(instance)
		if err != nil {
			return nil, nil, err
		}
		if !gwrun.IsLoopback(host) {
			return nil, nil, fmt.Errorf("instance address %q is not a loopback address (GATEWAY_LOOPBACK_ONLY=1): %.80q", host, instance)
		}
		return f(instance)
	}
}

// curatorFactory is a go-kit sd.Factory for instance strings that are
// Curator JSON node data, as go-kit's sd/zk Instancer publishes them: it
// reads the address and port and builds a go-kit HTTP client for r.
// hostPortFactory is the factory go-kit's examples write for sd/zk's
// instance strings: "host:port", anything else refused (go-kit's
// Endpointer then logs it and leaves it out).
func hostPortFactory(r route) kitsd.Factory {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 64
	client := &http.Client{Transport: transport}
	return func(instance string) (kitendpoint.Endpoint, io.Closer, error) {
		if _, err := hostPortHost(instance); err != nil {
			return nil, nil, err
		}
		u := &url.URL{Scheme: "http", Host: instance, Path: r.path}
		return kithttp.NewClient(r.method, u, r.enc, decodeUpstream, kithttp.SetClient(client)).Endpoint(), nil, nil
	}
}

// hostPortHost is the host of a "host:port" instance string.
func hostPortHost(instance string) (string, error) {
	host, port, err := net.SplitHostPort(instance)
	if err != nil || host == "" || port == "" {
		return "", fmt.Errorf("instance %.80q is not host:port", instance)
	}
	return host, nil
}

func curatorFactory(r route) kitsd.Factory {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 64
	client := &http.Client{Transport: transport}
	return func(instance string) (kitendpoint.Endpoint, io.Closer, error) {
		node, err := parseCuratorNode(instance)
		if err != nil {
			return nil, nil, err
		}
		u := &url.URL{Scheme: "http", Host: net.JoinHostPort(node.Address, strconv.Itoa(*node.Port)), Path: r.path}
		return kithttp.NewClient(r.method, u, r.enc, decodeUpstream, kithttp.SetClient(client)).Endpoint(), nil, nil
	}
}
