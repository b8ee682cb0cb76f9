package fxmodule

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"

	"go.uber.org/fx"

	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
)

// GoKitRegistration makes Discovery register the instance a second time,
// for consumers that still use go-kit's sd/zk, unchanged: an EPHEMERAL
// node under path/<service> whose data is the instance string
// "address:port", what go-kit's stock Instancer hands to its Factory (see
// sd.GoKitCodec). path is the go-kit Service.Path those consumers watch,
// e.g. "/services"; it may be Config.BasePath, where gracekit consumers
// read the service with sd.MixedCodec and route the instance once. path
// is checked as sd.BasePath checks a base path, when the app is built.
//
// A go-kit node has no status, so out of rotation is its absence: the
// twin exists while the instance is ready (its /readyz answers 200) and
// is deleted whenever it is not: a failing health check, an operator's
// drain of the instance's Curator node (gracekit drain), and the stop,
// whose first step deregisters it before the instance turns unready.
// go-kit consumers drop the instance when they see the twin go, as
// Curator readers drop it at OUT_OF_SERVICE, and the twin is created again
// when the instance is back (undrained, healthy again). A session expiry
// re-creates it only while the instance is ready.
func GoKitRegistration(path string) fx.Option {
	if err := sd.CheckRegistrarOptions(sd.BasePath(path)); err != nil {
		return fx.Error(fmt.Errorf("fxmodule: GoKitRegistration(%q): want the absolute ZooKeeper path go-kit's consumers watch the service under, such as /services: %w", path, err))
	}
	return fx.Supply(&goKitTwin{path: path})
}

// goKitTwin is the go-kit registration of GoKitRegistration.
type goKitTwin struct {
	path string

	mu       sync.Mutex
	reg      *sd.Registrar
	unfollow func()
}

// start registers the twin and makes it follow ready: present while the
// instance is ready, absent while it is not.
func (g *goKitTwin) start(ctx context.Context, sess *sd.Session, inst sd.Instance, ready *shutdown.Readiness, log *slog.Logger) error {
	client, err := sess.Client()
	if err != nil {
		return fmt.Errorf("fxmodule: go-kit registration: %w", err)
	}
	inst.Metadata = maps.Clone(inst.Metadata)
	if inst.Metadata == nil {
		inst.Metadata = map[string]string{}
	}
	inst.Metadata[sd.MetadataStatus] = string(twinStatus(ready.Ready()))
	reg, err := sd.NewRegistrar(client, inst, sd.WithCodec(sd.GoKitCodec{}), sd.BasePath(g.path),
		sd.ParentMode(sd.ParentsPersistent), sd.WithLogger(log.With("registration", "go-kit")))
	if err != nil {
		return fmt.Errorf("fxmodule: go-kit registration: %w", err)
	}
	if err := reg.RegisterContext(ctx); err != nil {
		reg.Deregister() // a half-made registration: bounded by the session timeout, not by ctx, which ended
		return fmt.Errorf("fxmodule: go-kit registration under %s: %w", g.path, err)
	}
	// A Readiness callback must not block: the status is handed to the
	// twin's Registrar with a ctx that has ended, so SetStatus returns at
	// once and its keeper writes it (one delete or create) in the order
	// the changes came.
	now, cancel := context.WithCancel(context.Background())
	cancel()
	unfollow := ready.Notify(func(ok bool) { _ = reg.SetStatus(now, twinStatus(ok)) })
	g.mu.Lock()
	g.reg, g.unfollow = reg, unfollow
	g.mu.Unlock()
	return nil
}

func twinStatus(ready bool) sd.Status {
	if ready {
		return sd.StatusUp
	}
	return sd.StatusOutOfService
}

func (g *goKitTwin) stop(ctx context.Context) error {
	g.mu.Lock()
	reg, unfollow := g.reg, g.unfollow
	g.reg, g.unfollow = nil, nil
	g.mu.Unlock()
	if reg == nil {
		return nil
	}
	unfollow()
	if err := reg.DeregisterContext(ctx); err != nil {
		return fmt.Errorf("fxmodule: go-kit registration: %w", err)
	}
	return nil
}

// ReadGoKitNodes makes the app's consumer (Consumer, Gateway, and
// Discovery's own watch of its FlushGateways) read services with
// sd.MixedCodec: Curator nodes, nodes go-kit's sd/zk Registrar wrote, and
// the twins of GoKitRegistration, none counted as malformed, each instance
// routed once. Use it while go-kit providers remain under Config.BasePath.
func ReadGoKitNodes() fx.Option { return fx.Supply(&readGoKit{}) }

// ReadGoKitTwins is ReadGoKitNodes for an app whose Config.BasePath is a
// go-kit path that gracekit providers write only their twins under
// (GoKitRegistration(path) with the providers' own base path elsewhere, so
// that Curator and Spring readers of that base path find nothing but
// JSON): twins are read as instances in rotation (sd.MixedCodec's
// RouteTwins), beside go-kit's own nodes. Such an instance leaves when its
// twin goes: the stop's first step, a failing health check, an operator's
// drain of its Curator node; gracekit's flush and tombstones do not reach
// it. Use one of ReadGoKitNodes and ReadGoKitTwins.
func ReadGoKitTwins() fx.Option { return fx.Supply(&readGoKit{routeTwins: true}) }

type readGoKit struct{ routeTwins bool }
