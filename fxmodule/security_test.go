package fxmodule_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	kitendpoint "github.com/go-kit/kit/endpoint"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/zktest"
)

// A provider and a consumer over TLS with client certificates, and over
// SASL with sessionRequireClientSASLAuth: register, route, drain, stop, as
// over plaintext.
func TestProviderAndConsumerOverTLSAndSASL(t *testing.T) {
	t.Parallel()
	pki, err := zktest.NewPKI(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	// Servers of their own: TLS and SASL are the server's configuration.
	tlsZK := ownZK(t, zktest.TLS(pki))
	saslZK := ownZK(t, zktest.SASL(map[string]string{"quote": "q-pass"}))
	tests := []struct {
		name string
		give func(fxmodule.Config) fxmodule.Config
	}{
		{"TLS with client auth", func(c fxmodule.Config) fxmodule.Config {
			c.ZKServers = tlsZK.SecureConnectString()
			c.ZKTLSCA, c.ZKTLSCert, c.ZKTLSKey = pki.CAFile, pki.ClientCert, pki.ClientKey
			return c
		}},
		{"SASL DIGEST-MD5", func(c fxmodule.Config) fxmodule.Config {
			c.ZKServers = saslZK.ConnectString()
			c.ZKSASLUser, c.ZKSASLPassword = "quote", "q-pass"
			return c
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			port := testutil.FreePort(t)
			var (
				c    *consumer.Consumer
				p    *provider.Provider
				call kitendpoint.Endpoint
			)
			server := func(lc fx.Lifecycle, c *consumer.Consumer) *http.Server {
				lc.Append(fx.StartHook(func(ctx context.Context) (err error) {
					call, err = c.Endpoint(ctx, "quote", echo)
					return err
				}))
				return helloServer()
			}
			cfg := tt.give(providerConfig(tlsZK, "quote-1", port))
			app := fxtest.New(t, fx.Supply(cfg), fx.Provide(server), fxmodule.Discovery, fxmodule.Consumer, fx.Populate(&c, &p))
			app.RequireStart()
			want := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			testutil.WaitFor(t, "the consumer routes to the provider", func() bool {
				got, err := call(context.Background(), nil)
				return err == nil && got == want
			})
			app.RequireStop()
			if err := p.Report().Err; err != nil {
				t.Fatalf("stop error: %v", err)
			}
		})
	}
}

func TestSecurityConfigIsCheckedAndRedacted(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "ca.pem")
	cfg := fxmodule.Config{ZKServers: "127.0.0.1:2181", ZKTLSCA: missing}
	build := func(cfg fxmodule.Config) error {
		return fx.New(fx.NopLogger, fx.Supply(cfg), fxmodule.Consumer, fx.Invoke(func(*consumer.Consumer) {})).Err()
	}
	err := build(cfg)
	var ce *fxmodule.ConfigError
	if !errors.As(err, &ce) || ce.Env != fxmodule.EnvZKTLSCA || !strings.Contains(err.Error(), missing) {
		t.Fatalf("a missing CA file: %v, want a *ConfigError naming %s and the file", err, fxmodule.EnvZKTLSCA)
	}

	cfg = fxmodule.Config{ZKServers: "127.0.0.1:2181", ZKSASLUser: "u"}
	if err := build(cfg); !errors.As(err, &ce) || ce.Env != fxmodule.EnvZKSASLPassword {
		t.Fatalf("a SASL user without a password: %v", err)
	}

	cfg = fxmodule.Config{ZKAuth: "u:digest-pw", ZKSASLUser: "u", ZKSASLPassword: "sasl-pw", FlushSecret: "flush-secret-0123456789"}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		s := fmt.Sprintf(verb, cfg)
		for _, secret := range []string{"digest-pw", "sasl-pw", "flush-secret-0123456789"} {
			if strings.Contains(s, secret) {
				t.Errorf("%s of Config shows %q: %s", verb, secret, s)
			}
		}
	}
}
