package fxmodule_test

import (
	"testing"

	"go.uber.org/fx"

	"github.com/gracekit/gracekit/fxmodule"
)

// Issue 22: a BasePath that path.Clean changes is refused when the app
// is built, as a ConfigError, not at Start as an sd error.
func TestAnUncleanBasePathIsAConfigError(t *testing.T) {
	for _, bp := range []string{"/services//quote", "/a/./b", "/a/../b", "/services/"} {
		cfg := fxmodule.Config{ZKServers: "127.0.0.1:2181", Service: "quote", Address: "127.0.0.1", Port: 8080, BasePath: bp}
		err := fx.New(fx.NopLogger, fx.Supply(cfg), fx.Provide(helloServer), fxmodule.Discovery).Err()
		if ce := configErr(t, err, "BasePath"); ce.Value != bp {
			t.Fatalf("ConfigError value %q, want %q", ce.Value, bp)
		}
	}
}

// Issue 22: with both servers, Port == GRPCPort is refused when the app
// is built, not at Start as "address already in use".
func TestOnePortForBothServersIsAConfigError(t *testing.T) {
	cfg := fxmodule.Config{ZKServers: "127.0.0.1:2181", Service: "quote", Address: "127.0.0.1", Port: 8080, GRPCPort: 8080}
	err := fx.New(fx.NopLogger, fx.Supply(cfg), fx.Provide(helloServer, newGRPCServer), fxmodule.Discovery).Err()
	configErr(t, err, "GRPCPort")
}
