package fxmodule

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/fx"
	"google.golang.org/grpc"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/shutdown/grpcstop"
)

// Discovery is the provider module: it registers the app's *http.Server,
// *grpc.Server, or both (two ports, one registration, one stop), in
// ZooKeeper, serves them, and stops them without failed requests. It needs
// a Config and at least one of the two servers in the container (build a
// *grpc.Server with GRPCServerOptions, and set Config.GRPCPort), and
// provides:
//
//   - *provider.Provider: the instance's whole life (provider.New); its
//     Report tells how the stop went, its Instance what was registered;
//   - *shutdown.Tracker and *shutdown.Readiness: the requests in flight
//     and the state behind /readyz and the gRPC health service;
//   - GRPCServerOptions: what the app's *grpc.Server is built with;
//   - *sd.Session: the ZooKeeper session (Client() once started), shared
//     with Consumer or Gateway when the app has one.
//
// The module invokes itself: no fx.Invoke is needed for it to run. Its
// constructor does no I/O: it checks the Config, and wraps the server's
// Handler once (nil is http.DefaultServeMux) so that /readyz and /livez
// are answered, Gateway's flush handler is served, and every other request
// goes through the Tracker. Set the Handler in the server's constructor:
// a handler set later is not wrapped. The server listens on its Addr when
// set, otherwise on Config.Port on all interfaces; the port registered is
// Config.Port, or the Addr's when Config.Port is zero, and the two must
// agree when both are set (see Config.Port).
//
// OnStart connects the session, listens, serves in a goroutine, registers
// and turns ready; each step ends a margin before fx's start deadline, so
// that an error such as a *sd.ConflictError (the instance id is held by
// another live session) is what Start returns, not fx's deadline error. A
// failed start undoes itself. OnStop runs the whole stop sequence:
// unready, out of service, deregister, flush the gateways, quiesce,
// drain, leave the session (which closes it unless a consumer still uses
// it). fx abandons OnStop at its stop deadline, so the provider takes every
// step's bound from that deadline (see shutdown.Sequence.Stop): unready,
// deregister, drain and the session's close always run and finish before
// it, sharing the time in proportion to their timeouts when fx's stop
// timeout is shorter than the sequence's bounds; the out-of-service, flush
// and quiesce steps are then cut short or skipped, and the hook logs a
// warning.
//
// Discovery composes with Consumer (a service that serves and calls
// others) and with Gateway (a gateway that registers and is flushed): both
// share Discovery's ZooKeeper session, start before it and stop after it.
// Without either, Discovery has a session of its own, and, with
// Config.FlushGateways, a consumer of its own that watches the gateways.
//
// Discovery's start hook runs after every other start hook of the scope it
// is used in, and its stop hook before theirs, whatever the order of the
// options: an app is never registered before its own start hooks ran (an
// fx.Invoke that builds the endpoints the handlers use, say), and stops
// serving before they stop. It decorates fx.Lifecycle in that scope to see
// them; hooks of a parent scope are not seen, so use Discovery at the root
// of the app or in the module whose hooks the handlers need.
var Discovery = fx.Options(
	fx.Provide(newHookOrder),
	fx.Decorate(decorateLifecycle),
	fx.Module("gracekit.discovery",
		fx.Provide(newDiscovery, newTracker, newGRPCServerOptions),
		fx.Invoke(func(*provider.Provider) {}),
	),
)

type discoveryParams struct {
	fx.In

	Common commonParams
	// Calling and Route come from Consumer or Gateway; first, so that
	// their hooks are appended, and run at start, before the provider's.
	Calling *calling     `optional:"true"`
	Route   *flushRoute  `optional:"true"`
	Server  *http.Server `optional:"true"`
	GRPC    *grpc.Server `optional:"true"`
	Tracker *shutdown.Tracker
	Health  HealthCheck `optional:"true"`
	// Twin is GoKitRegistration's.
	Twin *goKitTwin `optional:"true"`
}

// HealthCheck is the app's own health check, when it provides one: while
// it fails (Config.HealthFailures times in a row) the instance leaves
// rotation without stopping, and it comes back when it passes again (see
// provider.HealthCheck).
type HealthCheck func(ctx context.Context) error

type discoveryResult struct {
	fx.Out

	Provider  *provider.Provider
	Readiness *shutdown.Readiness
	Session   *sd.Session
}

func newDiscovery(p discoveryParams) (discoveryResult, error) {
	if p.Server == nil && p.GRPC == nil {
		return discoveryResult{}, fmt.Errorf("fxmodule: Discovery needs an *http.Server or a *grpc.Server (or both) in the app, got neither")
	}
	if p.Route != nil && p.Server == nil {
		return discoveryResult{}, fmt.Errorf("fxmodule: Gateway serves its flush handler on the app's *http.Server, and the app provides none")
	}
	if err := requireSet(providerNeeds(p.Common.Config, p.Server, p.GRPC != nil, p.Route != nil)...); err != nil {
		return discoveryResult{}, err
	}
	s, err := p.Common.Config.checkProvider(p.Route != nil)
	if err != nil {
		return discoveryResult{}, err
	}
	var (
		port     int
		addr     string
		grpcAddr string
	)
	if p.Server != nil {
		if port, addr, err = s.listen(p.Server); err != nil {
			return discoveryResult{}, err
		}
	}
	if p.GRPC != nil {
		g, err := s.grpcPort(p.Server == nil)
		if err != nil {
			return discoveryResult{}, err
		}
		grpcAddr = net.JoinHostPort("", strconv.Itoa(g))
		if p.Server == nil {
			port = g
		} else if g == port {
			// Said here, not as Start's "address already in use", which
			// reads like another process holding the port.
			return discoveryResult{}, &ConfigError{Field: "GRPCPort", Env: EnvGRPCPort, Value: strconv.Itoa(g),
				Want: fmt.Sprintf("a port other than %d, which the *http.Server listens on: the two servers need a port each", port)}
		}
	}
	log := p.Common.logger()
	var (
		sess     *sd.Session
		watcher  *consumer.Consumer // watches the FlushGateways
		ownWatch bool               // watcher is Discovery's own: its hook starts and stops it
	)
	if p.Calling != nil {
		sess, watcher = p.Calling.sess, p.Calling.consumer
	} else if sess, err = s.newSession(log); err != nil {
		return discoveryResult{}, err
	} else if len(s.FlushGateways) > 0 {
		if watcher, err = s.consumerOver(sess, p.Common); err != nil {
			return discoveryResult{}, err
		}
		ownWatch = true
	}

	cfg := s.providerConfig()
	cfg.Instance = sd.Instance{Name: s.Service, ID: s.InstanceID, Address: s.Address, Port: port, Metadata: s.Metadata}
	if p.Server != nil {
		cfg.Server = p.Server
	}
	cfg.Addr = addr
	cfg.GRPC, cfg.GRPCAddr, cfg.Tracker = p.GRPC, grpcAddr, p.Tracker
	if p.Health != nil {
		cfg.Health = provider.HealthCheck{Check: p.Health, Interval: s.HealthInterval,
			Failures: s.HealthFailures, Passes: s.HealthPasses, Hold: s.HealthHold}
	}
	opts := append([]provider.Option{provider.WithLogger(log), provider.WithRegistrarOptions(sd.BasePath(s.BasePath))},
		p.Common.Metrics.providerOptions()...)
	if len(s.FlushGateways) > 0 {
		opts = append(opts, provider.WithConsumer(watcher))
	}
	if s.SnapshotDir != "" {
		// Static stability: serve through an outage at start, as the
		// consumer does from its snapshot.
		opts = append(opts, provider.WithRegisterWhenReachable())
	}
	if p.Route != nil {
		opts = append(opts, provider.WithRoute(p.Route.path, p.Route.handler))
	}
	prov, err := provider.New(sess, cfg, opts...)
	if err != nil {
		return discoveryResult{}, fmt.Errorf("fxmodule: %w", err)
	}

	var live *liveFollower // Config.SnapshotRequireLive's
	appendLast(p.Common.Lifecycle, fx.Hook{
		OnStart: func(ctx context.Context) error {
			if ownWatch {
				if err := watcher.Start(ctx); err != nil {
					return fmt.Errorf("fxmodule: %w", err)
				}
			}
			if s.SnapshotRequireLive && watcher != nil {
				live = followLive(watcher, prov.Readiness())
			}
			if err := prov.Start(ctx); err != nil {
				live.halt()
				if ownWatch {
					_ = watcher.Stop(context.WithoutCancel(ctx)) // bounded: closing a session is
				}
				return err
			}
			if p.Twin != nil {
				if err := p.Twin.start(ctx, sess, prov.Instance(), prov.Readiness(), log); err != nil {
					live.halt()
					_ = prov.Stop(context.WithoutCancel(ctx)) // bounded by the stop's own step timeouts
					if ownWatch {
						_ = watcher.Stop(context.WithoutCancel(ctx))
					}
					return err
				}
			}
			return nil
		},
		OnStop: func(ctx context.Context) error {
			// fx's stop deadline is the real stop timeout. Only when it
			// leaves less than the sequence's bounds add up to are steps
			// shortened or skipped; a deadline a little under the budget
			// (the time fx took to get here) is not short.
			if dl, ok := ctx.Deadline(); ok {
				if left := time.Until(dl); left < s.stopTotal {
					log.Warn("fx's stop deadline leaves less than the stop sequence's bounds; the flush and quiesce may be cut short or skipped (use fxmodule.StopTimeout to set fx's stop timeout and the budget)",
						"left", left.Round(time.Millisecond), "bounds", s.stopTotal, "budget", s.StopTimeout)
				}
			}
			live.halt() // the stop's unready holds from here on
			var err error
			if p.Twin != nil {
				err = p.Twin.stop(ctx) // first: go-kit consumers drop us by its deletion
			}
			err = errors.Join(err, prov.Stop(ctx))
			if ownWatch {
				err = errors.Join(err, watcher.Stop(ctx))
			}
			return err
		},
	})
	return discoveryResult{Provider: prov, Readiness: prov.Readiness(), Session: sess}, nil
}

// GRPCServerOptions are the options an app's *grpc.Server is built with
// for Discovery to serve it: interceptors that count the calls in the
// provider's Tracker (health, reflection and channelz aside) and send the
// closing signal once the stop began. Discovery provides them:
//
//	fx.Provide(func(o fxmodule.GRPCServerOptions) *grpc.Server {
//		s := grpc.NewServer(o...)
//		pb.RegisterQuotesServer(s, quotes{})
//		return s
//	})
//
// Register no health service: Discovery registers the standard one, which
// follows the instance's readiness.
type GRPCServerOptions []grpc.ServerOption

func newTracker() *shutdown.Tracker { return new(shutdown.Tracker) }

func newGRPCServerOptions(t *shutdown.Tracker) GRPCServerOptions {
	return GRPCServerOptions(grpcstop.ServerOptions(t))
}

// StopTimeout sets fx's stop timeout and the module's stop budget
// (Config.StopTimeout) to d in one option: fx does not tell modules its
// stop timeout, and the stop sequence's bounds are checked against it.
func StopTimeout(d time.Duration) fx.Option {
	return fx.Options(
		fx.StopTimeout(d),
		fx.Decorate(func(c Config) Config {
			c.StopTimeout, c.fxStopTimeout = d, d
			return c
		}),
	)
}

// FromEnv provides the Config from the environment (ConfigFromEnv) and,
// when GRACEKIT_STOP_TIMEOUT is set, sets fx's stop timeout to it too, so
// that a deployment configured only through the environment stops within
// the timeout it asked for. It reads the environment when called, as
// fx.New is given its options. A malformed variable fails the app's build
// with a *ConfigError. With fx.Provide(ConfigFromEnv) instead, a
// GRACEKIT_STOP_TIMEOUT that fxmodule.StopTimeout does not match fails the
// build: fx would stop the app at its own timeout, not that one.
func FromEnv() fx.Option {
	c, err := ConfigFromEnv()
	if err != nil {
		return fx.Error(err)
	}
	opts := []fx.Option{fx.Provide(func() Config { return c })}
	if c.StopTimeout > 0 {
		c.fxStopTimeout = c.StopTimeout
		opts = append(opts, fx.StopTimeout(c.StopTimeout))
	}
	return fx.Options(opts...)
}
