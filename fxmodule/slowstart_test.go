package fxmodule_test

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/fxmodule"
)

// consumerOf builds the Consumer module over cfg, without starting it.
func consumerOf(t *testing.T, cfg fxmodule.Config) (*consumer.Consumer, error) {
	t.Helper()
	var c *consumer.Consumer
	app := fx.New(fx.NopLogger, fxmodule.Consumer, fx.Supply(cfg), fx.Populate(&c))
	return c, app.Err()
}

func TestConsumerRampsByDefaultAndOneFieldTurnsItOff(t *testing.T) {
	base := fxmodule.Config{ZKServers: "127.0.0.1:2181"}
	tests := []struct {
		name   string
		give   func(*fxmodule.Config)
		want   endpoint.SlowStart
		wantOn bool
	}{
		{"the defaults ramp over DefaultSlowStartWindow", func(*fxmodule.Config) {},
			endpoint.SlowStart{Window: fxmodule.DefaultSlowStartWindow, Aggression: 1, MinWeight: 0.1}, true},
		{"the fields set the ramp", func(c *fxmodule.Config) {
			c.SlowStartWindow, c.SlowStartAggression, c.SlowStartMinWeight = 5*time.Second, 2, 0.25
		}, endpoint.SlowStart{Window: 5 * time.Second, Aggression: 2, MinWeight: 0.25}, true},
		{"NoSlowStart turns it off", func(c *fxmodule.Config) { c.NoSlowStart = true }, endpoint.SlowStart{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			tt.give(&cfg)
			c, err := consumerOf(t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, on := c.SlowStart()
			if got != tt.want || on != tt.wantOn {
				t.Fatalf("slow start %+v (on %v), want %+v (on %v)", got, on, tt.want, tt.wantOn)
			}
		})
	}
}

func TestSlowStartConfigErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name string
		give func(*fxmodule.Config)
		want string
	}{
		{"a negative window", func(c *fxmodule.Config) { c.SlowStartWindow = -time.Second }, "SlowStartWindow"},
		{"a negative aggression", func(c *fxmodule.Config) { c.SlowStartAggression = -1 }, "SlowStartAggression"},
		{"a min weight above 1", func(c *fxmodule.Config) { c.SlowStartMinWeight = 2 }, "SlowStartMinWeight"},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is a ConfigError for its field", func(t *testing.T) {
			cfg := fxmodule.Config{ZKServers: "127.0.0.1:2181"}
			tt.give(&cfg)
			_, err := consumerOf(t, cfg)
			var ce *fxmodule.ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.want {
				t.Fatalf("got %v, want a ConfigError for %s", err, tt.want)
			}
		})
	}
}

func TestSlowStartFromEnv(t *testing.T) {
	t.Setenv(fxmodule.EnvSlowStartWindow, "12s")
	t.Setenv(fxmodule.EnvSlowStartAggr, "1.5")
	t.Setenv(fxmodule.EnvSlowStartMinWeight, "0.2")
	t.Setenv(fxmodule.EnvSlowStart, "off")
	cfg, err := fxmodule.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SlowStartWindow != 12*time.Second || cfg.SlowStartAggression != 1.5 || cfg.SlowStartMinWeight != 0.2 || !cfg.NoSlowStart {
		t.Fatalf("config %+v", cfg)
	}
	for _, bad := range []struct{ env, give string }{
		{fxmodule.EnvSlowStart, "maybe"},
		{fxmodule.EnvSlowStartWindow, "soon"},
		{fxmodule.EnvSlowStartAggr, "steep"},
		{fxmodule.EnvSlowStartMinWeight, "tenth"},
		// Zero is a value, not the default (issue 40's explicit zeros).
		{fxmodule.EnvSlowStartWindow, "0s"},
		{fxmodule.EnvSlowStartAggr, "0"},
		{fxmodule.EnvSlowStartMinWeight, "0"},
	} {
		t.Run(bad.env+"="+bad.give+" is rejected", func(t *testing.T) {
			t.Setenv(bad.env, bad.give)
			_, err := fxmodule.ConfigFromEnv()
			var ce *fxmodule.ConfigError
			if !errors.As(err, &ce) || ce.Env != bad.env {
				t.Fatalf("got %v, want a ConfigError for %s", err, bad.env)
			}
		})
	}
}
