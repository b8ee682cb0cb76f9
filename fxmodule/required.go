package fxmodule

import (
	"net/http"
	"strings"
)

// required is a setting a role cannot start without.
type required struct {
	field, env, example string
	unset               bool
}

// requireSet fails when some required settings are unset, naming all of
// them at once: a first run with nothing set then says everything to set,
// not one variable per attempt. The error is a *ConfigError for the first,
// its Unset listing them all.
// Malformed values are left to the checks that follow.
func requireSet(needs ...required) error {
	var envs, fields, examples []string
	var first *required
	for i := range needs {
		if n := &needs[i]; n.unset {
			if first == nil {
				first = n
			}
			envs = append(envs, n.env)
			fields = append(fields, "Config."+n.field)
			examples = append(examples, n.env+"="+n.example)
		}
	}
	if first == nil {
		return nil
	}
	return &ConfigError{Field: first.field, Env: first.env, Unset: envs,
		Want: strings.Join(fields, ", ") + "; for a local try: " + strings.Join(examples, " ") + "; see docs/CONFIG.md"}
}

// sessionNeeds are what every role needs.
func sessionNeeds(c Config) []required {
	return []required{{field: "ZKServers", env: EnvZKServers, example: "127.0.0.1:2181", unset: c.ZKServers == ""}}
}

// providerNeeds are what Discovery needs for the servers it was given.
// gateway adds the flush secret, which the gateway's own check asks for too.
func providerNeeds(c Config, srv *http.Server, grpc, gateway bool) []required {
	signed := gateway || len(c.FlushTargets)+len(c.FlushGateways) > 0
	return append(sessionNeeds(c),
		required{field: "Service", env: EnvService, example: "quote", unset: c.Service == ""},
		required{field: "Address", env: EnvAddress, example: "127.0.0.1", unset: c.Address == ""},
		required{field: "FlushSecret", env: EnvFlushSecret, example: "a-secret-of-16-bytes-or-more", unset: signed && c.FlushSecret == ""},
		required{field: "Port", env: EnvPort, example: "8080", unset: srv != nil && srv.Addr == "" && c.Port == 0},
		required{field: "GRPCPort", env: EnvGRPCPort, example: "9090", unset: grpc && c.GRPCPort == 0},
	)
}
