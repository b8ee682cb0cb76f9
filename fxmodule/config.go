package fxmodule

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/fx"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/lifecycle"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/shutdown/flush"
)

// DefaultFlushPath is where Gateway mounts the flush handler, and what it
// registers in its metadata under sd.MetadataFlushPath.
const DefaultFlushPath = "/gracekit/flush"

// DefaultStopTimeout is the stop budget when Config.StopTimeout is zero: fx's
// own default stop timeout.
const DefaultStopTimeout = fx.DefaultTimeout

// Environment variables read by ConfigFromEnv, one per Config field. See the
// package documentation for their formats and defaults.
const (
	EnvZKServers          = "GRACEKIT_ZK_SERVERS"
	EnvZKSessionTimeout   = "GRACEKIT_ZK_SESSION_TIMEOUT"
	EnvZKAuth             = "GRACEKIT_ZK_AUTH"
	EnvZKTLSCA            = "GRACEKIT_ZK_TLS_CA"
	EnvZKTLSCert          = "GRACEKIT_ZK_TLS_CERT"
	EnvZKTLSKey           = "GRACEKIT_ZK_TLS_KEY"
	EnvZKTLSServerName    = "GRACEKIT_ZK_TLS_SERVER_NAME"
	EnvZKTLSMinVersion    = "GRACEKIT_ZK_TLS_MIN_VERSION"
	EnvZKSASLUser         = "GRACEKIT_ZK_SASL_USER"
	EnvZKSASLPassword     = "GRACEKIT_ZK_SASL_PASSWORD"
	EnvBasePath           = "GRACEKIT_BASE_PATH"
	EnvService            = "GRACEKIT_SERVICE"
	EnvInstanceID         = "GRACEKIT_INSTANCE_ID"
	EnvAddress            = "GRACEKIT_ADDRESS"
	EnvPort               = "GRACEKIT_PORT"
	EnvGRPCPort           = "GRACEKIT_GRPC_PORT"
	EnvMetadata           = "GRACEKIT_METADATA"
	EnvFlushSecret        = "GRACEKIT_FLUSH_SECRET"
	EnvFlushTargets       = "GRACEKIT_FLUSH_TARGETS"
	EnvSpringFlushTargets = "GRACEKIT_SPRING_FLUSH_TARGETS"
	EnvFlushGateways      = "GRACEKIT_FLUSH_GATEWAYS"
	EnvFlushPath          = "GRACEKIT_FLUSH_PATH"
	EnvFlushAudiences     = "GRACEKIT_FLUSH_AUDIENCES"
	EnvQuietWindow        = "GRACEKIT_QUIET_WINDOW"
	EnvMaxQuiesce         = "GRACEKIT_MAX_QUIESCE"
	EnvDrainTimeout       = "GRACEKIT_DRAIN_TIMEOUT"
	EnvStopTimeout        = "GRACEKIT_STOP_TIMEOUT"
	EnvHealthInterval     = "GRACEKIT_HEALTH_INTERVAL"
	EnvHealthFailures     = "GRACEKIT_HEALTH_FAILURES"
	EnvHealthPasses       = "GRACEKIT_HEALTH_PASSES"
	EnvHealthHold         = "GRACEKIT_HEALTH_HOLD"
	EnvSlowStart          = "GRACEKIT_SLOW_START"
	EnvSlowStartWindow    = "GRACEKIT_SLOW_START_WINDOW"
	EnvSlowStartAggr      = "GRACEKIT_SLOW_START_AGGRESSION"
	EnvSlowStartMinWeight = "GRACEKIT_SLOW_START_MIN_WEIGHT"
)

// DefaultSlowStartWindow is the ramp of Consumer and Gateway when
// Config.SlowStartWindow is zero (see endpoint.DefaultSlowStartWindow).
const DefaultSlowStartWindow = endpoint.DefaultSlowStartWindow

// Config is what Discovery, Consumer and Gateway need: Consumer reads only
// the ZooKeeper fields and BasePath, Gateway adds FlushSecret, FlushPath and
// FlushAudiences, and Discovery reads the rest. It is plain data: supply it
// with fx.Supply, or provide it from the environment with
// fxmodule.FromEnv(). Zero values take the defaults listed
// in the package documentation.
type Config struct {
	// ZKServers is the ZooKeeper connect string, "host:port,...[/chroot]".
	// Required.
	ZKServers string
	// ZKSessionTimeout is the session timeout; zero is
	// sd.DefaultSessionTimeout.
	ZKSessionTimeout time.Duration
	// ZKAuth is "user:password" for ZooKeeper digest auth; empty for none.
	ZKAuth string
	// ZKTLSCA, ZKTLSCert and ZKTLSKey are PEM files (see sd.TLSConfig):
	// any of them set connects with TLS, to the servers' secureClientPort.
	// ZKTLSServerName is checked against the servers' certificates (empty:
	// each server's host); ZKTLSMinVersion is "1.2" (the default) or
	// "1.3". See docs/SECURITY.md.
	ZKTLSCA, ZKTLSCert, ZKTLSKey string
	ZKTLSServerName              string
	ZKTLSMinVersion              string
	// ZKSASLUser and ZKSASLPassword authenticate every session with SASL
	// DIGEST-MD5 (sd.SASL); empty for none.
	ZKSASLUser, ZKSASLPassword string
	// BasePath is the parent of service nodes; empty is sd.DefaultBasePath.
	BasePath string

	// Service is this instance's service name. Required.
	Service string
	// InstanceID is this instance's id; empty gets a random UUID.
	InstanceID string
	// Address is the address registered for this instance. Required.
	Address string
	// Port is the port registered. The server listens on its own Addr
	// when that is set, and on Port on all interfaces otherwise. Zero
	// takes the port of the *http.Server's Addr; a Port that disagrees
	// with that Addr is an error, so that the port registered is the one
	// listened on. Required unless the server's Addr names the port.
	Port int
	// GRPCPort is the port the app's *grpc.Server listens on, on all
	// interfaces, registered in the metadata (sd.MetadataGRPCPort), and as
	// the Port when the app has no *http.Server (Port must then be zero
	// or the same). Required with a *grpc.Server.
	GRPCPort int
	// Metadata is added to the registered instance's metadata.
	Metadata map[string]string

	// FlushSecret is the shared HMAC secret of flush requests, at least
	// flush.MinSecretLen bytes. Required by Gateway, and by Discovery
	// when it has signed flush targets (FlushTargets, FlushGateways);
	// Consumer never needs it.
	FlushSecret string
	// FlushTargets are gateway flush URLs that get a signed POST at stop.
	FlushTargets []string
	// SpringFlushTargets are Spring-style flush URLs, called with GET.
	SpringFlushTargets []string
	// FlushGateways are gateway service names: every instance registered
	// under them with sd.MetadataFlushPath in its metadata is flushed at
	// stop, at http://address:port followed by that path.
	FlushGateways []string
	// FlushPath is where Gateway serves its flush handler; empty is
	// DefaultFlushPath. Discovery ignores it.
	FlushPath string
	// FlushAudiences are the other URLs providers reach Gateway's flush
	// handler at, such as a load balancer's, as their FlushTargets name
	// it. A signed flush names the URL it was sent to, and the handler
	// accepts only http://Address:Port followed by FlushPath (what
	// FlushGateways discovers) and these. Discovery ignores it.
	FlushAudiences []string

	// QuietWindow, MaxQuiesce and DrainTimeout bound the stop sequence's
	// quiesce and drain; zero takes shutdown's defaults.
	QuietWindow  time.Duration
	MaxQuiesce   time.Duration
	DrainTimeout time.Duration
	// StopTimeout is the app's stop timeout, which the stop sequence's
	// bounds must fit in. fx does not tell it to modules: set it to the
	// value given to fx.StopTimeout. Zero is DefaultStopTimeout (fx's
	// default). Read from GRACEKIT_STOP_TIMEOUT, it must reach fx too:
	// use FromEnv, or StopTimeout with the same value.
	StopTimeout time.Duration

	// HealthInterval, HealthFailures, HealthPasses and HealthHold tune the
	// app's HealthCheck, when it provides one (provider.HealthCheck; zero
	// takes provider's defaults).
	HealthInterval time.Duration
	HealthFailures int
	HealthPasses   int
	HealthHold     time.Duration

	// SlowStartWindow is how long Consumer and Gateway ramp in a provider
	// instance that joins a called service after their first load of it,
	// from its registration time (endpoint.WithSlowStart; docs/SLOWSTART.md);
	// zero is DefaultSlowStartWindow. SlowStartAggression shapes the ramp
	// (zero is 1, linear) and SlowStartMinWeight is the share it starts at
	// (zero is 0.1). NoSlowStart turns slow start off. Their GRACEKIT_*
	// variables set to zero are refused: unset them for the defaults.
	SlowStartWindow     time.Duration
	SlowStartAggression float64
	SlowStartMinWeight  float64
	NoSlowStart         bool

	// SnapshotDir turns on the snapshot of Consumer and Gateway (and of
	// Discovery's own watch of FlushGateways): each called service's last
	// live set is kept in a file there, and served when ZooKeeper does not
	// answer the service's first load within SnapshotStartWait, if younger
	// than SnapshotMaxAge (consumer.WithSnapshot; docs/STATIC-STABILITY.md).
	// Empty: no snapshot. Zero durations are consumer's defaults
	// (consumer.DefaultSnapshotStartWait, consumer.DefaultSnapshotMaxAge).
	SnapshotDir       string
	SnapshotStartWait time.Duration
	SnapshotMaxAge    time.Duration
	// SnapshotRequireLive makes Discovery's readiness require a live view:
	// not ready (/readyz 503, gRPC NOT_SERVING) while the app's consumer
	// serves a service from its snapshot (GRACEKIT_SNAPSHOT_READINESS=
	// require-live). By default an instance serving a snapshot is ready.
	SnapshotRequireLive bool

	// stopFromEnv: StopTimeout was read from GRACEKIT_STOP_TIMEOUT.
	stopFromEnv bool
	// fxStopTimeout is fx's stop timeout, when StopTimeout or FromEnv set it.
	fxStopTimeout time.Duration
}

// ConfigError says that a Config field, or the environment variable it was
// read from, has a value out of range, or that required settings are
// unset (Unset).
type ConfigError struct {
	// Field is the Config field, e.g. "Port"; with Unset, the first
	// unset one.
	Field string
	// Env is the environment variable of the field.
	Env string
	// Value is the bad value, "" when missing; secrets are not repeated.
	Value string
	// Want says what is allowed; with Unset, the Config fields unset and
	// what to set for a local try.
	Want string
	// Unset, when not empty, are the environment variables of every
	// required setting left unset: the error is then that, and names
	// them all at once.
	Unset []string
	// Err is the underlying cause, if any.
	Err error
}

func (e *ConfigError) Error() string {
	if len(e.Unset) > 0 {
		return fmt.Sprintf("fxmodule: required settings unset: %s (%s)", strings.Join(e.Unset, ", "), e.Want)
	}
	msg := fmt.Sprintf("fxmodule: invalid Config.%s %q (env %s): want %s", e.Field, e.Value, e.Env, e.Want)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *ConfigError) Unwrap() error { return e.Err }

// ConfigFromEnv reads a Config from the GRACEKIT_* environment variables,
// for code without fx (a plain main, a tool); an fx app uses FromEnv,
// which also gives fx the stop timeout. Unset variables leave their field
// zero, which takes the default; a malformed value is a *ConfigError.
// Required fields are checked when the module builds, not here.
func ConfigFromEnv() (Config, error) {
	return configFromLookup(os.LookupEnv)
}

func configFromLookup(lookup func(string) (string, bool)) (Config, error) {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	c := Config{
		ZKServers:          get(EnvZKServers),
		ZKAuth:             get(EnvZKAuth),
		ZKTLSCA:            get(EnvZKTLSCA),
		ZKTLSCert:          get(EnvZKTLSCert),
		ZKTLSKey:           get(EnvZKTLSKey),
		ZKTLSServerName:    get(EnvZKTLSServerName),
		ZKTLSMinVersion:    get(EnvZKTLSMinVersion),
		ZKSASLUser:         get(EnvZKSASLUser),
		ZKSASLPassword:     get(EnvZKSASLPassword),
		BasePath:           get(EnvBasePath),
		Service:            get(EnvService),
		InstanceID:         get(EnvInstanceID),
		Address:            get(EnvAddress),
		FlushSecret:        get(EnvFlushSecret),
		FlushTargets:       list(get(EnvFlushTargets)),
		SpringFlushTargets: list(get(EnvSpringFlushTargets)),
		FlushGateways:      list(get(EnvFlushGateways)),
		FlushPath:          get(EnvFlushPath),
		FlushAudiences:     list(get(EnvFlushAudiences)),
	}
	if v := get(EnvPort); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil {
			return Config{}, &ConfigError{Field: "Port", Env: EnvPort, Value: v, Want: "a port from 1 to 65535", Err: err}
		}
		c.Port = p
	}
	if v := get(EnvGRPCPort); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil {
			return Config{}, &ConfigError{Field: "GRPCPort", Env: EnvGRPCPort, Value: v, Want: "a port from 1 to 65535", Err: err}
		}
		c.GRPCPort = p
	}
	for _, n := range []struct {
		field, env string
		p          *int
	}{
		{"HealthFailures", EnvHealthFailures, &c.HealthFailures},
		{"HealthPasses", EnvHealthPasses, &c.HealthPasses},
	} {
		if v := get(n.env); v != "" {
			x, err := strconv.Atoi(v)
			if err != nil || x < 1 {
				return Config{}, &ConfigError{Field: n.field, Env: n.env, Value: v, Want: "a count of 1 or more", Err: err}
			}
			*n.p = x
		}
	}
	if v := get(EnvMetadata); v != "" {
		c.Metadata = map[string]string{}
		for _, kv := range list(v) {
			k, val, ok := strings.Cut(kv, "=")
			if !ok || strings.TrimSpace(k) == "" {
				return Config{}, &ConfigError{Field: "Metadata", Env: EnvMetadata, Value: v, Want: "comma-separated key=value pairs"}
			}
			c.Metadata[strings.TrimSpace(k)] = strings.TrimSpace(val)
		}
	}
	for _, d := range []struct {
		field, env string
		p          *time.Duration
	}{
		{"ZKSessionTimeout", EnvZKSessionTimeout, &c.ZKSessionTimeout},
		{"QuietWindow", EnvQuietWindow, &c.QuietWindow},
		{"MaxQuiesce", EnvMaxQuiesce, &c.MaxQuiesce},
		{"DrainTimeout", EnvDrainTimeout, &c.DrainTimeout},
		{"StopTimeout", EnvStopTimeout, &c.StopTimeout},
		{"HealthInterval", EnvHealthInterval, &c.HealthInterval},
		{"HealthHold", EnvHealthHold, &c.HealthHold},
	} {
		v := get(d.env)
		if v == "" {
			continue
		}
		x, err := time.ParseDuration(v)
		if err != nil {
			return Config{}, &ConfigError{Field: d.field, Env: d.env, Value: v, Want: "a Go duration such as 250ms or 2s", Err: err}
		}
		*d.p = x
	}
	// In Config a zero slow start field means the default; a variable set
	// to zero is a value, checked as endpoint.WithSlowStart checks it.
	if v := get(EnvSlowStartWindow); v != "" {
		x, err := time.ParseDuration(v)
		if err != nil || x <= 0 {
			return Config{}, &ConfigError{Field: "SlowStartWindow", Env: EnvSlowStartWindow, Value: v, Want: "a positive Go duration such as 30s (unset for the default)", Err: err}
		}
		c.SlowStartWindow = x
	}
	switch v := strings.ToLower(get(EnvSlowStart)); v {
	case "", "on":
	case "off":
		c.NoSlowStart = true
	default:
		return Config{}, &ConfigError{Field: "NoSlowStart", Env: EnvSlowStart, Value: v, Want: "on or off"}
	}
	for _, f := range []struct {
		field, env, want string
		p                *float64
	}{
		{"SlowStartAggression", EnvSlowStartAggr, "a number above 0 such as 1 (unset for the default)", &c.SlowStartAggression},
		{"SlowStartMinWeight", EnvSlowStartMinWeight, "a number above 0 and at most 1 such as 0.1 (unset for the default)", &c.SlowStartMinWeight},
	} {
		if v := get(f.env); v != "" {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || x == 0 {
				return Config{}, &ConfigError{Field: f.field, Env: f.env, Value: v, Want: f.want, Err: err}
			}
			*f.p = x
		}
	}
	if err := snapshotFromLookup(&c, get); err != nil {
		return Config{}, err
	}
	c.stopFromEnv = c.StopTimeout != 0
	return c, nil
}

// slowStart is the consumer option of the Config's slow start, nil when
// NoSlowStart; its fields are checked here.
func (c Config) slowStart() (consumer.Option, error) {
	if c.NoSlowStart {
		return nil, nil
	}
	s := endpoint.SlowStart{Window: c.SlowStartWindow, Aggression: c.SlowStartAggression, MinWeight: c.SlowStartMinWeight}
	if s.Window == 0 {
		s.Window = DefaultSlowStartWindow
	}
	if s.Aggression == 0 {
		s.Aggression = endpoint.DefaultSlowStartAggression
	}
	if s.MinWeight == 0 {
		s.MinWeight = endpoint.DefaultSlowStartMinWeight
	}
	if err := s.Check(); err != nil {
		field, env, value := "SlowStartWindow", EnvSlowStartWindow, s.Window.String()
		switch {
		case s.Window <= 0:
		case !(s.Aggression > 0) || math.IsInf(s.Aggression, 1):
			field, env, value = "SlowStartAggression", EnvSlowStartAggr, strconv.FormatFloat(s.Aggression, 'g', -1, 64)
		default:
			field, env, value = "SlowStartMinWeight", EnvSlowStartMinWeight, strconv.FormatFloat(s.MinWeight, 'g', -1, 64)
		}
		return nil, &ConfigError{Field: field, Env: env, Value: value,
			Want: "a positive window, a positive aggression and a min weight above 0 and at most 1, or zero for the defaults (NoSlowStart turns slow start off)", Err: err}
	}
	return consumer.WithSlowStart(s.Window, s.Aggression, s.MinWeight), nil
}

// list splits a comma-separated value, dropping empty items.
func list(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// settings is a checked Config with its defaults applied.
type settings struct {
	Config
	authUser, authPassword string
	security               []sd.ClientOption // TLS and SASL, checked
	// stopTotal is the sum of the stop steps' bounds (checkBudget).
	stopTotal time.Duration
}

// checkSession validates what every module needs, the ZooKeeper session
// and the base path, and applies their defaults.
func (c Config) checkSession() (*settings, error) {
	s := &settings{Config: c}
	if _, _, err := sd.ParseConnectString(c.ZKServers); err != nil {
		return nil, &ConfigError{Field: "ZKServers", Env: EnvZKServers, Value: c.ZKServers, Want: "a ZooKeeper connect string such as zk1:2181,zk2:2181/chroot", Err: err}
	}
	if c.ZKSessionTimeout == 0 {
		s.ZKSessionTimeout = sd.DefaultSessionTimeout
	} else if c.ZKSessionTimeout < sd.MinSessionTimeout || c.ZKSessionTimeout > sd.MaxSessionTimeout {
		return nil, &ConfigError{Field: "ZKSessionTimeout", Env: EnvZKSessionTimeout, Value: c.ZKSessionTimeout.String(), Want: fmt.Sprintf("%s to %s", sd.MinSessionTimeout, sd.MaxSessionTimeout)}
	}
	if c.ZKAuth != "" {
		u, p, ok := strings.Cut(c.ZKAuth, ":")
		if !ok || u == "" {
			return nil, &ConfigError{Field: "ZKAuth", Env: EnvZKAuth, Value: "(redacted)", Want: `"user:password" with a non-empty user`}
		}
		s.authUser, s.authPassword = u, p
	}
	sec, err := c.security()
	if err != nil {
		return nil, err
	}
	s.security = sec
	if c.BasePath == "" {
		s.BasePath = sd.DefaultBasePath
	} else if !strings.HasPrefix(c.BasePath, "/") || c.BasePath == "/" || path.Clean(c.BasePath) != c.BasePath {
		// sd refuses these at Start; say it at build, naming the field.
		return nil, &ConfigError{Field: "BasePath", Env: EnvBasePath, Value: c.BasePath, Want: "a clean absolute ZooKeeper path such as /services (no trailing '/', '//', '.' or '..')"}
	}
	return s, nil
}

// newSession returns the session s describes. It does no I/O: the roles
// connect it when they start.
func (s *settings) newSession(log *slog.Logger) (*sd.Session, error) {
	opts := []sd.ClientOption{sd.SessionTimeout(s.ZKSessionTimeout), sd.Logger(log)}
	if s.authUser != "" {
		opts = append(opts, sd.DigestAuth(s.authUser, s.authPassword))
	}
	opts = append(opts, s.security...)
	sess, err := sd.NewSession(s.ZKServers, opts...)
	if err != nil {
		return nil, fmt.Errorf("fxmodule: ZooKeeper session (Config.ZKServers %q): %w", s.ZKServers, err)
	}
	return sess, nil
}

// checkProvider validates what Discovery needs on top of checkSession:
// the instance, the flush targets and the stop bounds. gateway says that
// Gateway is in the app: its flush path goes in the metadata.
func (c Config) checkProvider(gateway bool) (*settings, error) {
	s, err := c.checkSession()
	if err != nil {
		return nil, err
	}
	// A znode name: no '/', and not "." or "..", as sd checks after connecting.
	if !sd.ValidNodeName(c.Service) {
		return nil, &ConfigError{Field: "Service", Env: EnvService, Value: c.Service, Want: "a service name without '/', not \".\" or \"..\""}
	}
	if c.InstanceID != "" && !sd.ValidNodeName(c.InstanceID) {
		return nil, &ConfigError{Field: "InstanceID", Env: EnvInstanceID, Value: c.InstanceID, Want: "an id without '/', not \".\" or \"..\", or empty for a random UUID"}
	}
	if !sd.ValidHost(c.Address) {
		return nil, &ConfigError{Field: "Address", Env: EnvAddress, Value: c.Address,
			Want: "the host name or IP address other services reach this instance at, without a port, a scheme or spaces (IPv6 without brackets), e.g. 10.0.0.7 or quote-1.svc"}
	}
	if c.GRPCPort < 0 || c.GRPCPort > 65535 {
		return nil, &ConfigError{Field: "GRPCPort", Env: EnvGRPCPort, Value: strconv.Itoa(c.GRPCPort), Want: "a port from 1 to 65535, or zero without a *grpc.Server"}
	}
	if c.Port < 0 || c.Port > 65535 {
		return nil, &ConfigError{Field: "Port", Env: EnvPort, Value: strconv.Itoa(c.Port), Want: "a port from 1 to 65535, or zero when the *http.Server's Addr names the port"}
	}
	s.Metadata = make(map[string]string, len(c.Metadata)+1)
	for k, v := range c.Metadata {
		// The module owns these keys: the status follows the lifecycle, only
		// a Gateway advertises a flush path, and the drain marks are written
		// by the Registrar and gracekit drain (sd.ReservedMetadata).
		if slices.Contains(sd.ReservedMetadata, k) {
			return nil, &ConfigError{Field: "Metadata", Env: EnvMetadata, Value: k + "=" + v,
				Want: fmt.Sprintf("keys other than %s, which the module and gracekit drain set", strings.Join(sd.ReservedMetadata, ", "))}
		}
		s.Metadata[k] = v
	}
	flushes := len(c.FlushTargets)+len(c.FlushGateways) > 0 // signed ones
	if flushes && len(c.FlushSecret) < flush.MinSecretLen {
		return nil, secretError(c)
	}
	for _, t := range []struct {
		field, env string
		urls       []string
	}{
		{"FlushTargets", EnvFlushTargets, c.FlushTargets},
		{"SpringFlushTargets", EnvSpringFlushTargets, c.SpringFlushTargets},
	} {
		for _, raw := range t.urls {
			u, err := url.Parse(raw)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, &ConfigError{Field: t.field, Env: t.env, Value: raw, Want: "absolute http or https URLs", Err: err}
			}
		}
	}
	for _, g := range c.FlushGateways {
		if !sd.ValidNodeName(g) {
			return nil, &ConfigError{Field: "FlushGateways", Env: EnvFlushGateways, Value: g, Want: "gateway service names without '/'"}
		}
	}
	if gateway {
		g, err := c.checkGateway()
		if err != nil {
			return nil, err
		}
		s.Metadata[sd.MetadataFlushPath] = g.FlushPath
	}
	for _, d := range []struct {
		field, env string
		v          time.Duration
	}{
		{"QuietWindow", EnvQuietWindow, c.QuietWindow},
		{"MaxQuiesce", EnvMaxQuiesce, c.MaxQuiesce},
		{"DrainTimeout", EnvDrainTimeout, c.DrainTimeout},
		{"StopTimeout", EnvStopTimeout, c.StopTimeout},
		{"HealthInterval", EnvHealthInterval, c.HealthInterval},
		{"HealthHold", EnvHealthHold, c.HealthHold},
	} {
		if d.v < 0 {
			return nil, &ConfigError{Field: d.field, Env: d.env, Value: d.v.String(), Want: "a positive duration, or zero for the default"}
		}
	}
	if c.stopFromEnv && c.fxStopTimeout != c.StopTimeout {
		return nil, &ConfigError{Field: "StopTimeout", Env: EnvStopTimeout, Value: c.StopTimeout.String(),
			Want: "a stop timeout that fx uses too: fx does not let a module set it, so build the app with fxmodule.FromEnv() " +
				"(which reads it and sets fx.StopTimeout) or add fxmodule.StopTimeout(" + c.StopTimeout.String() + ")"}
	}
	if c.StopTimeout == 0 {
		s.StopTimeout = DefaultStopTimeout
	}
	if c.HealthFailures < 0 || c.HealthPasses < 0 {
		return nil, &ConfigError{Field: "HealthFailures", Env: EnvHealthFailures, Value: strconv.Itoa(c.HealthFailures) + "/" + strconv.Itoa(c.HealthPasses), Want: "counts of 1 or more, or zero for the defaults"}
	}
	qw, mq := s.QuietWindow, s.MaxQuiesce
	if qw == 0 {
		qw = shutdown.DefaultQuietWindow
	}
	if mq == 0 {
		mq = shutdown.DefaultMaxQuiesce
	}
	if qw > mq {
		return nil, &ConfigError{Field: "QuietWindow", Env: EnvQuietWindow, Value: qw.String(), Want: fmt.Sprintf("at most MaxQuiesce (%s)", mq)}
	}
	if err := s.checkBudget(); err != nil {
		return nil, err
	}
	return s, nil
}

// checkGateway validates what Gateway needs on top of checkSession: the
// flush secret and path.
func (c Config) checkGateway() (*settings, error) {
	s, err := c.checkSession()
	if err != nil {
		return nil, err
	}
	if len(c.FlushSecret) < flush.MinSecretLen {
		return nil, secretError(c)
	}
	for _, raw := range c.FlushAudiences {
		if _, err := flush.Audience(raw); err != nil { // what the handler would refuse
			return nil, &ConfigError{Field: "FlushAudiences", Env: EnvFlushAudiences, Value: raw,
				Want: "absolute http or https URLs, as providers' FlushTargets name this gateway's flush handler (e.g. http://gw.internal:8080/gracekit/flush)", Err: err}
		}
	}
	if c.FlushPath == "" {
		s.FlushPath = DefaultFlushPath
	} else if !strings.HasPrefix(c.FlushPath, "/") || strings.ContainsAny(c.FlushPath, " {}?#") || reservedPaths[c.FlushPath] || path.Clean(c.FlushPath) != c.FlushPath {
		return nil, &ConfigError{Field: "FlushPath", Env: EnvFlushPath, Value: c.FlushPath,
			Want: "a clean URL path such as " + DefaultFlushPath + ", other than /, /readyz and /livez"}
	}
	return s, nil
}

func secretError(c Config) *ConfigError {
	return &ConfigError{Field: "FlushSecret", Env: EnvFlushSecret, Value: fmt.Sprintf("(%d bytes)", len(c.FlushSecret)),
		Want: fmt.Sprintf("a shared secret of at least %d bytes", flush.MinSecretLen)}
}

// listen reconciles Config.Port with the server's Addr: it returns the
// port to register. The server listens on its Addr when set (the provider
// honours it), else on Config.Port on all interfaces; a Port of zero takes
// the Addr's, and a Port that disagrees with it is an error, so that the
// port registered is always the one listened on.
func (s *settings) listen(srv *http.Server) (port int, addr string, err error) {
	if srv.Addr == "" {
		if s.Port == 0 {
			return 0, "", &ConfigError{Field: "Port", Env: EnvPort, Value: "0", Want: "a port from 1 to 65535, or the *http.Server's Addr naming one"}
		}
		return s.Port, net.JoinHostPort("", strconv.Itoa(s.Port)), nil
	}
	_, ps, err := net.SplitHostPort(srv.Addr)
	p, perr := strconv.Atoi(ps)
	if err != nil || perr != nil || p < 1 || p > 65535 {
		return 0, "", &ConfigError{Field: "Port", Env: EnvPort, Value: strconv.Itoa(s.Port),
			Want: fmt.Sprintf("the port of the *http.Server's Addr %q, which must name one from 1 to 65535 (or leave Addr empty)", srv.Addr), Err: err}
	}
	if s.Port != 0 && s.Port != p {
		return 0, "", &ConfigError{Field: "Port", Env: EnvPort, Value: strconv.Itoa(s.Port),
			Want: fmt.Sprintf("zero or %d, the port of the *http.Server's Addr %q, which the server listens on", p, srv.Addr)}
	}
	return p, srv.Addr, nil
}

// grpcPort checks Config.GRPCPort for the app's *grpc.Server; alone says
// that it is the only server, so its port is the one registered.
func (s *settings) grpcPort(alone bool) (int, error) {
	if s.GRPCPort < 1 || s.GRPCPort > 65535 {
		return 0, &ConfigError{Field: "GRPCPort", Env: EnvGRPCPort, Value: strconv.Itoa(s.GRPCPort), Want: "a port from 1 to 65535 for the app's *grpc.Server to listen on"}
	}
	if alone && s.Port != 0 && s.Port != s.GRPCPort {
		return 0, &ConfigError{Field: "Port", Env: EnvPort, Value: strconv.Itoa(s.Port),
			Want: fmt.Sprintf("zero or %d: with a *grpc.Server only, the port registered is GRPCPort", s.GRPCPort)}
	}
	return s.GRPCPort, nil
}

func (s *settings) hasFlushTargets() bool {
	return len(s.FlushTargets)+len(s.SpringFlushTargets)+len(s.FlushGateways) > 0
}

// providerConfig is the provider.Config of s, without its Instance and
// Server.
func (s *settings) providerConfig() provider.Config {
	return provider.Config{
		Flush: provider.Flush{
			Secret:        []byte(s.FlushSecret),
			Targets:       s.FlushTargets,
			SpringTargets: s.SpringFlushTargets,
			Gateways:      s.FlushGateways,
		},
		QuietWindow:  s.QuietWindow,
		MaxQuiesce:   s.MaxQuiesce,
		DrainTimeout: s.DrainTimeout,
		StopBudget:   s.StopTimeout,
	}
}

// checkBudget builds a Sequence with stand-in parts, so that a plan over
// the stop budget is a *ConfigError for StopTimeout, and keeps the sum of
// the stop bounds, which the stop hook compares with fx's deadline.
func (s *settings) checkBudget() error {
	cfg := shutdown.Config{
		Registration: nopRegistration{},
		Tracker:      &shutdown.Tracker{},
		Server:       &http.Server{},
		CloseSession: func(context.Context) error { return nil },
		QuietWindow:  s.QuietWindow,
		MaxQuiesce:   s.MaxQuiesce,
		DrainTimeout: s.DrainTimeout,
	}
	if s.hasFlushTargets() {
		n, err := flush.NewNotifier(flush.Self{Service: s.Service, ID: "budget-check"}, make([]byte, flush.MinSecretLen))
		if err != nil {
			return fmt.Errorf("fxmodule: flush notifier: %w", err)
		}
		cfg.Notifier = n
	}
	seq, err := shutdown.NewSequence(cfg, lifecycle.StopBudget(s.StopTimeout))
	var be *lifecycle.BudgetError
	if errors.As(err, &be) {
		return &ConfigError{Field: "StopTimeout", Env: EnvStopTimeout, Value: s.StopTimeout.String(),
			Want: fmt.Sprintf("at least the stop sequence's bounds, %s; set fx.StopTimeout to match, or lower DrainTimeout and MaxQuiesce", be.Sum), Err: err}
	}
	if err != nil {
		return fmt.Errorf("fxmodule: stop sequence: %w", err)
	}
	s.stopTotal = seq.StopTotal()
	return nil
}

// reservedPaths are served by the provider's wrapper mux already.
var reservedPaths = map[string]bool{"/": true, "/readyz": true, "/livez": true}

// nopRegistration stands in for the Registration in checkBudget.
type nopRegistration struct{}

func (nopRegistration) RegisterContext(context.Context) error      { return nil }
func (nopRegistration) SetStatus(context.Context, sd.Status) error { return nil }
func (nopRegistration) DeregisterContext(context.Context) error    { return nil }

// security is the TLS and SASL options of the ZKTLS* and ZKSASL* fields,
// checked now: a missing or malformed file is a *ConfigError naming the
// field, its variable and the file.
func (c Config) security() ([]sd.ClientOption, error) {
	var opts []sd.ClientOption
	if c.ZKTLSCA != "" || c.ZKTLSCert != "" || c.ZKTLSKey != "" || c.ZKTLSServerName != "" || c.ZKTLSMinVersion != "" {
		var v uint16
		switch c.ZKTLSMinVersion {
		case "", "1.2":
			v = tls.VersionTLS12
		case "1.3":
			v = tls.VersionTLS13
		default:
			return nil, &ConfigError{Field: "ZKTLSMinVersion", Env: EnvZKTLSMinVersion, Value: c.ZKTLSMinVersion, Want: "1.2 or 1.3"}
		}
		opt := sd.TLS(sd.TLSConfig{CAFile: c.ZKTLSCA, CertFile: c.ZKTLSCert, KeyFile: c.ZKTLSKey, ServerName: c.ZKTLSServerName, MinVersion: v})
		if _, err := sd.NewSession("127.0.0.1:2181", opt); err != nil { // reads the files; dials nothing
			field, env, value := "ZKTLSCA", EnvZKTLSCA, c.ZKTLSCA
			if strings.Contains(err.Error(), "client") {
				field, env, value = "ZKTLSCert", EnvZKTLSCert, c.ZKTLSCert+", "+c.ZKTLSKey
			}
			return nil, &ConfigError{Field: field, Env: env, Value: value, Want: "readable PEM files (see docs/SECURITY.md)", Err: err}
		}
		opts = append(opts, opt)
	}
	switch {
	case c.ZKSASLUser == "" && c.ZKSASLPassword == "":
	case c.ZKSASLUser == "":
		return nil, &ConfigError{Field: "ZKSASLUser", Env: EnvZKSASLUser, Want: "a user of the servers' JAAS Server section, with ZKSASLPassword"}
	case c.ZKSASLPassword == "":
		return nil, &ConfigError{Field: "ZKSASLPassword", Env: EnvZKSASLPassword, Value: "", Want: "the password of ZKSASLUser " + strconv.Quote(c.ZKSASLUser)}
	default:
		opts = append(opts, sd.SASL(c.ZKSASLUser, c.ZKSASLPassword))
	}
	return opts, nil
}

// String prints the Config with its secrets (ZKAuth, ZKSASLPassword,
// FlushSecret) redacted, so that a Config logged with %v shows none.
func (c Config) String() string {
	type plain Config // without the method
	p := plain(c)
	for _, f := range []*string{&p.ZKAuth, &p.ZKSASLPassword, &p.FlushSecret} {
		if *f != "" {
			*f = "(redacted)"
		}
	}
	return fmt.Sprintf("%+v", p)
}

// GoString is String, for %#v.
func (c Config) GoString() string { return "fxmodule.Config" + c.String() }
