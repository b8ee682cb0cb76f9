package fxmodule

import (
	"fmt"
	"log/slog"

	"go.uber.org/fx"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/sd"
)

// Consumer is the module of a service that calls other services. It needs
// a Config (only its ZooKeeper fields and BasePath are read; no flush
// secret) and provides:
//
//   - *consumer.Consumer: per service, an sd.Instancer feeding an
//     endpoint.Endpointer whose balancer endpoint.NewRetry wraps
//     (Consumer.Endpoint), and the Instancers themselves
//     (Consumer.Instancer).
//
// Its endpoints ramp in a provider instance that joins a service after
// their first load of it (slow start, docs/SLOWSTART.md): over
// Config.SlowStartWindow, DefaultSlowStartWindow unless set; set
// Config.NoSlowStart (GRACEKIT_SLOW_START=off) to give it its full share
// at once.
//
// Its constructor does no I/O. Its OnStart hook connects the ZooKeeper
// session within the start context; its OnStop hook closes the
// Endpointers, stops the Instancers and leaves the session, within the stop
// context. The consumer is usable from its OnStart on: build endpoints in
// a hook appended after it, that is in an OnStart hook appended by a
// constructor that takes the *consumer.Consumer (the server's constructor,
// typically), not in the constructor itself, where Endpoint returns
// sd.ErrNotStarted:
//
//	fx.Provide(func(lc fx.Lifecycle, c *consumer.Consumer) *http.Server {
//		var quote kitendpoint.Endpoint // set before the server serves
//		lc.Append(fx.StartHook(func(ctx context.Context) (err error) {
//			quote, err = c.Endpoint(ctx, "quote", factory.Factory)
//			return err
//		}))
//		return &http.Server{Handler: newHandler(&quote)}
//	})
//
// With Discovery in the same app, both use one ZooKeeper session, the
// consumer starts before the provider and stops after it (after the
// drain, so that requests in flight can still call out), and Discovery's
// FlushGateways are watched through this consumer. Gateway includes
// Consumer: use one of the two.
var Consumer = fx.Module("gracekit.consumer",
	fx.Provide(newConsumer),
)

// commonParams are what every module takes from the container.
type commonParams struct {
	fx.In

	Lifecycle fx.Lifecycle
	Config    Config
	// Logger receives lifecycle events and component logs; without one
	// they go to slog.Default().
	Logger *slog.Logger `optional:"true"`
	// Metrics, when supplied, are updated (see Metrics).
	Metrics *Metrics `optional:"true"`
	// GoKit is ReadGoKitNodes' or ReadGoKitTwins'.
	GoKit *readGoKit `optional:"true"`
}

func (p commonParams) logger() *slog.Logger {
	if p.Logger == nil {
		return slog.Default()
	}
	return p.Logger
}

// calling is what Consumer or Gateway hands to Discovery in the same app:
// the session to share and the consumer that watches the FlushGateways.
// Its type is unexported, so that only the modules provide it.
type calling struct {
	sess     *sd.Session
	consumer *consumer.Consumer
}

type consumerResult struct {
	fx.Out

	Consumer *consumer.Consumer
	Calling  *calling
}

func newConsumer(p commonParams) (consumerResult, error) {
	if err := requireSet(sessionNeeds(p.Config)...); err != nil {
		return consumerResult{}, err
	}
	s, err := p.Config.checkSession()
	if err != nil {
		return consumerResult{}, err
	}
	c, err := s.newCalling(p)
	if err != nil {
		return consumerResult{}, err
	}
	return consumerResult{Consumer: c.consumer, Calling: c}, nil
}

// newCalling makes the session and the consumer over it, and appends the
// consumer's hooks. It does no I/O.
func (s *settings) newCalling(p commonParams) (*calling, error) {
	sess, err := s.newSession(p.logger())
	if err != nil {
		return nil, err
	}
	c, err := s.consumerOver(sess, p)
	if err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.Hook{OnStart: c.Start, OnStop: c.Stop})
	return &calling{sess: sess, consumer: c}, nil
}

// consumerOver makes a consumer over sess. It does no I/O.
func (s *settings) consumerOver(sess *sd.Session, p commonParams) (*consumer.Consumer, error) {
	in := []sd.InstancerOption{sd.BasePath(s.BasePath)}
	if p.GoKit != nil {
		in = append(in, sd.WithCodec(sd.MixedCodec{RouteTwins: p.GoKit.routeTwins}))
	}
	opts := []consumer.Option{
		consumer.WithLogger(p.logger()),
		consumer.WithInstancerOptions(in...),
		consumer.WithInstancerMetrics(p.Metrics.instancerOptions),
	}
	ss, err := s.slowStart()
	if err != nil {
		return nil, err
	}
	if ss != nil {
		opts = append(opts, ss)
	}
	snap, err := s.snapshot(p.Metrics)
	if err != nil {
		return nil, err
	}
	opts = append(opts, snap...)
	c, err := consumer.New(sess, opts...)
	if err != nil {
		return nil, fmt.Errorf("fxmodule: %w", err)
	}
	return c, nil
}
