// Command cachedgw is the demo's third consumer: an HTTP gateway in front of
// the "quote" providers that caches its instance list the way Spring Cloud
// LoadBalancer does by default (CachingServiceInstanceListSupplier over
// Spring Cloud Zookeeper's discovery client, spring.cloud.loadbalancer.cache.ttl
// 35s):
//
//   - the list is read from ZooKeeper (children of <base path>/<upstream>
//     and each one's Curator JSON, nodes OUT_OF_SERVICE skipped) and reused
//     for CACHE_TTL (default 35s), with no watches;
//   - an empty list is re-read at once, on the next request;
//   - calls go round robin over the list; a GET that fails with a transport
//     error is retried once on the next instance and a POST never (Spring's
//     retry defaults: maxRetriesOnNextServiceInstance=1, GET only);
//   - GET /flushCache?applicationName=&host=&id= (Spring style, parsed with
//     flush.ParseSpringQuery) removes that id from the cached list, and
//     from a read in progress, until the next read.
//
// Routes: GET /api/quote?symbol= and POST /api/orders, forwarded like
// examples/gateway's (an order's Idempotency-Key goes on as Order-Key; a
// failure answers 502 with a JSON error naming the "upstream" address),
// /flushCache, /readyz (200 once a read succeeded), /livez, /metrics
// (Prometheus: cachedgw_requests_total, cachedgw_failures_total,
// cachedgw_retries_total by route; cachedgw_cache_reads_total by reason,
// cachedgw_flushes_total by result, cachedgw_instances).
//
// Environment: GRACEKIT_ZK_SERVERS, GRACEKIT_ZK_TLS_* (a secureClientPort;
// no SASL), GRACEKIT_BASE_PATH, GRACEKIT_PORT,
// GATEWAY_UPSTREAM (default quote), GATEWAY_LOOPBACK_ONLY (1: instances
// whose address is not a loopback IP are left out), CACHE_TTL (a Go
// duration). It stops on SIGTERM or SIGINT; a second one kills it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/examples/internal/gwrun"
	"github.com/gracekit/gracekit/examples/internal/zktls"
	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/sd"
)

// DefaultTTL is Spring Cloud LoadBalancer's default cache TTL.
const DefaultTTL = 35 * time.Second

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cachedgw:", err)
		os.Exit(1)
	}
}

func run() error {
	servers, chroot, err := sd.ParseConnectString(os.Getenv(fxmodule.EnvZKServers))
	if err != nil {
		return fmt.Errorf("%s: %w", fxmodule.EnvZKServers, err)
	}
	basePath := os.Getenv(fxmodule.EnvBasePath)
	if basePath == "" {
		basePath = sd.DefaultBasePath
	} else if !strings.HasPrefix(basePath, "/") || strings.HasSuffix(basePath, "/") {
		return fmt.Errorf("invalid %s %q (an absolute ZooKeeper path such as /services)", fxmodule.EnvBasePath, basePath)
	}
	port, err := strconv.Atoi(os.Getenv(fxmodule.EnvPort))
	if err != nil || port < 1 || port > 65535 {
		return fmt.Errorf("invalid %s %q (a port from 1 to 65535)", fxmodule.EnvPort, os.Getenv(fxmodule.EnvPort))
	}
	upstream := gwrun.Upstream()
	loopbackOnly, err := gwrun.LoopbackOnly()
	if err != nil {
		return err
	}
	ttl := DefaultTTL
	if v := os.Getenv("CACHE_TTL"); v != "" {
		if ttl, err = time.ParseDuration(v); err != nil || ttl <= 0 {
			return fmt.Errorf("invalid CACHE_TTL %q (a positive Go duration such as 35s)", v)
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).
		With("app", "cachedgw", "upstream", upstream)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	dial, err := dialer()
	if err != nil {
		return err
	}
	conn, events, err := zk.Connect(servers, 10*time.Second, zk.WithLogger(nopLogger{}), zk.WithDialer(dial))
	if err != nil {
		return err
	}
	defer conn.Close()
	go func() { // drain the session events: a full channel drops them
		for range events {
		}
	}()

	m := newMetrics()
	c := newCache(&zkLister{conn: conn, path: chroot + basePath + "/" + upstream, service: upstream, loopbackOnly: loopbackOnly}, ttl, m, log)
	g := &gateway{cache: c, service: upstream, m: m, client: newClient()}
	srv := &http.Server{Handler: g.mux(), ReadHeaderTimeout: 5 * time.Second}
	served, err := gwrun.Listen(srv, port)
	if err != nil {
		return err
	}
	// The first read, so that /readyz turns 200; a failure is retried on
	// the next request.
	if _, err := c.list(context.Background()); err != nil {
		log.Warn("first read of the instance list", "err", err)
	}
	log.Info("serving", "port", port, "path", chroot+basePath+"/"+upstream, "ttl", ttl, "loopback_only", loopbackOnly)
	return served.Wait(sigs, log)
}

// dialer is go-zookeeper's default, net.DialTimeout, or with
// GRACEKIT_ZK_TLS_* a TLS one: Spring Cloud Zookeeper's client is set up
// for a secureClientPort by system properties (docs/SECURITY.md), this
// stand-in by gracekit's variables.
func dialer() (zktls.DialFunc, error) {
	cfg, err := fxmodule.ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	t, err := zktls.FromConfig(cfg)
	if err != nil || t == nil {
		return net.DialTimeout, err
	}
	return zktls.Wrap(*t, net.DialTimeout)
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// zkLister reads a service's instances from ZooKeeper, once, without
// watches, as Curator's queryForInstances does.
type zkLister struct {
	conn         *zk.Conn
	path         string
	service      string
	loopbackOnly bool
}

func (l *zkLister) List(ctx context.Context) ([]target, error) {
	children, _, err := l.conn.Children(l.path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []target
	for _, child := range children {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		data, _, err := l.conn.Get(l.path + "/" + child)
		if errors.Is(err, zk.ErrNoNode) {
			continue // gone meanwhile
		}
		if err != nil {
			return nil, err
		}
		inst, err := sd.CuratorCodec{}.Decode(l.service, child, data)
		if err != nil || inst.Status() == sd.StatusOutOfService || inst.Port == 0 {
			continue
		}
		if l.loopbackOnly && !gwrun.IsLoopback(inst.Address) {
			continue
		}
		out = append(out, target{id: inst.ID, addr: inst.HostPort()})
	}
	return out, nil
}

// drain reads and discards up to 4 KiB of r, so that the connection can
// be reused.
func drain(r io.Reader) { _, _ = io.CopyN(io.Discard, r, 4<<10) }
