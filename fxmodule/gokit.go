package fxmodule

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"go.uber.org/fx"

	"github.com/gracekit/gracekit/sd"
)

// GoKitRegistration makes Discovery register the instance a second time,
// for consumers that still use go-kit's sd/zk, unchanged: an EPHEMERAL
// node under path/<service> whose data is the instance string
// "address:port", what go-kit's stock Instancer hands to its Factory (see
// sd.GoKitCodec). path is the go-kit Service.Path those consumers watch,
// e.g. "/services"; it may be Config.BasePath, where gracekit consumers
// read the service with sd.MixedCodec and route the instance once.
//
// The twin is registered once the instance is ready, and deregistered as
// the stop's first step, before the instance turns unready: go-kit
// consumers have no status to watch, so its deletion is how they drop the
// instance, and the quiesce then serves what they still send. A health
// check taking the instance out of rotation leaves the twin in place.
func GoKitRegistration(path string) fx.Option {
	if !strings.HasPrefix(path, "/") || (len(path) > 1 && strings.HasSuffix(path, "/")) {
		return fx.Error(fmt.Errorf("fxmodule: GoKitRegistration(%q): want the absolute ZooKeeper path go-kit's consumers watch the service under, such as /services", path))
	}
	return fx.Supply(&goKitTwin{path: path})
}

// goKitTwin is the go-kit registration of GoKitRegistration.
type goKitTwin struct {
	path string

	mu  sync.Mutex
	reg *sd.Registrar
}

func (g *goKitTwin) start(ctx context.Context, sess *sd.Session, inst sd.Instance, log *slog.Logger) error {
	client, err := sess.Client()
	if err != nil {
		return fmt.Errorf("fxmodule: go-kit registration: %w", err)
	}
	reg, err := sd.NewRegistrar(client, inst, sd.WithCodec(sd.GoKitCodec{}), sd.BasePath(g.path),
		sd.ParentMode(sd.ParentsPersistent), sd.WithLogger(log.With("registration", "go-kit")))
	if err != nil {
		return fmt.Errorf("fxmodule: go-kit registration: %w", err)
	}
	if err := reg.RegisterContext(ctx); err != nil {
		reg.Deregister() // a half-made registration: bounded by the session timeout, not by ctx, which ended
		return fmt.Errorf("fxmodule: go-kit registration under %s: %w", g.path, err)
	}
	g.mu.Lock()
	g.reg = reg
	g.mu.Unlock()
	return nil
}

func (g *goKitTwin) stop(ctx context.Context) error {
	g.mu.Lock()
	reg := g.reg
	g.reg = nil
	g.mu.Unlock()
	if reg == nil {
		return nil
	}
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
// twin goes, the stop's first step; gracekit's status, flush and tombstones
// do not reach it. Use one of ReadGoKitNodes and ReadGoKitTwins.
func ReadGoKitTwins() fx.Option { return fx.Supply(&readGoKit{routeTwins: true}) }

type readGoKit struct{ routeTwins bool }
