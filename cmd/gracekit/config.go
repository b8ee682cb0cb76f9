package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/gracekit/gracekit/internal/zkconn"
	"github.com/gracekit/gracekit/sd"
)

// The library's variables, fxmodule.EnvZKServers and the next three. They
// are spelled out rather than imported: importing fxmodule would link fx,
// provider and shutdown into an operator's tool for four strings.
// TestEnvNamesAreTheLibrarys keeps the two in step.
const (
	envZKServers        = "GRACEKIT_ZK_SERVERS"
	envZKSessionTimeout = "GRACEKIT_ZK_SESSION_TIMEOUT"
	envZKAuth           = "GRACEKIT_ZK_AUTH"
	envBasePath         = "GRACEKIT_BASE_PATH"

	envTLSCA         = "GRACEKIT_ZK_TLS_CA"
	envTLSCert       = "GRACEKIT_ZK_TLS_CERT"
	envTLSKey        = "GRACEKIT_ZK_TLS_KEY"
	envTLSServerName = "GRACEKIT_ZK_TLS_SERVER_NAME"
	envTLSMinVersion = "GRACEKIT_ZK_TLS_MIN_VERSION"
	envSASLUser      = "GRACEKIT_ZK_SASL_USER"
	envSASLPassword  = "GRACEKIT_ZK_SASL_PASSWORD"
)

// Node layouts, -layout. The library reads no variable for its layout (the
// codec is an option in code), so neither does the tool.
const (
	layoutAuto    = "auto"    // Curator JSON and go-kit nodes, each as what it is; the layout detected per service
	layoutCurator = "curator" // Curator JSON only: anything else is malformed
	layoutPlain   = "plain"   // data-less host:port nodes
	layoutGoKit   = "gokit"   // go-kit sd/zk nodes (and gracekit's twins), whose data is the instance string
	layoutMixed   = "mixed"   // a service migrating from go-kit: both, as sd.MixedCodec reads them
)

// cliCodec is how the tool reads a mixed service: as sd.MixedCodec, with
// twins read as what they are for go-kit consumers (in rotation while
// they exist), since ls and check show nodes, not routes.
var cliCodec sd.Codec = sd.MixedCodec{RouteTwins: true}

// config is where and how to reach the registry, and how to print.
type config struct {
	connect        string
	servers        []string
	chroot         string
	user, password string
	timeout        time.Duration
	basePath       string
	json           bool
	codec          sd.Codec      // the node layout, -layout
	layout         string        // -layout's value
	sec            *zkconn.Layer // TLS and SASL, -tls-* and -sasl-*
}

// commonFlags are the flags every command takes. A flag left unset takes
// its environment variable, then the library's default.
type commonFlags struct {
	zk, basePath, auth, output, layout string
	timeout                            time.Duration

	tlsCA, tlsCert, tlsKey, tlsServerName, tlsMinVersion string
	saslUser, saslPassword                               string
}

func addCommonFlags(fs *flag.FlagSet) *commonFlags {
	f := &commonFlags{}
	fs.StringVar(&f.zk, "zk", "", "ZooKeeper connect string host:port,...[/chroot] (default $"+envZKServers+")")
	fs.StringVar(&f.basePath, "base-path", "", "parent of service nodes (default $"+envBasePath+", else "+sd.DefaultBasePath+")")
	fs.StringVar(&f.auth, "auth", "", "digest credentials user:password (default $"+envZKAuth+")")
	fs.DurationVar(&f.timeout, "timeout", 0, fmt.Sprintf("session timeout, also the bound on connecting (default $%s, else %v)", envZKSessionTimeout, sd.DefaultSessionTimeout))
	fs.StringVar(&f.tlsCA, "tls-ca", "", "PEM bundle of the CAs of the servers' certificates: connect with TLS, to the servers' secureClientPort (default $"+envTLSCA+")")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM client certificate, for ssl.clientAuth=need (default $"+envTLSCert+")")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM key of -tls-cert (default $"+envTLSKey+")")
	fs.StringVar(&f.tlsServerName, "tls-server-name", "", "name checked against the servers' certificates (default $"+envTLSServerName+", else each server's host)")
	fs.StringVar(&f.tlsMinVersion, "tls-min-version", "", "lowest TLS version, 1.2 or 1.3 (default $"+envTLSMinVersion+", else 1.2)")
	fs.StringVar(&f.saslUser, "sasl-user", "", "SASL DIGEST-MD5 user of the servers' JAAS Server section (default $"+envSASLUser+")")
	fs.StringVar(&f.saslPassword, "sasl-password", "", "its password; prefer $"+envSASLPassword+", which other users of the machine cannot read in the process list")
	fs.StringVar(&f.output, "o", "text", "output format: text or json")
	fs.StringVar(&f.layout, "layout", layoutAuto, "node layout: auto (Curator JSON and go-kit nodes, each read as what it is), curator (Curator x-discovery JSON, Spring's, only), gokit (go-kit sd/zk nodes, sd.GoKitCodec), mixed (both, sd.MixedCodec) or plain (data-less /<base>/<service>/<host:port> nodes, sd.PlainCodec)")
	return f
}

// resolve applies the environment and the defaults to what fs did not set,
// and checks the result as the library would.
func (f *commonFlags) resolve(fs *flag.FlagSet) (config, error) {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	pick := func(flagName, flagValue, env string) string {
		if set[flagName] {
			return flagValue
		}
		return strings.TrimSpace(os.Getenv(env))
	}
	var c config
	switch f.output {
	case "text":
	case "json":
		c.json = true
	default:
		return c, &usageError{fmt.Sprintf("-o %q: want text or json", f.output)}
	}

	c.layout = f.layout
	switch f.layout {
	case layoutAuto, layoutMixed:
		c.codec = cliCodec
	case layoutCurator:
		c.codec = sd.CuratorCodec{}
	case layoutPlain:
		c.codec = sd.PlainCodec{}
	case layoutGoKit:
		c.codec = sd.GoKitCodec{}
	default:
		return c, &usageError{fmt.Sprintf("-layout %q: want %s, %s, %s, %s or %s", f.layout, layoutAuto, layoutCurator, layoutGoKit, layoutMixed, layoutPlain)}
	}

	c.connect = pick("zk", f.zk, envZKServers)
	if c.connect == "" {
		return c, &usageError{"no ZooKeeper to ask: set -zk or " + envZKServers + " (host:port,...[/chroot])"}
	}
	var err error
	if c.servers, c.chroot, err = sd.ParseConnectString(c.connect); err != nil {
		return c, &usageError{fmt.Sprintf("-zk / %s: %v", envZKServers, err)}
	}

	c.timeout = f.timeout
	if !set["timeout"] {
		c.timeout = sd.DefaultSessionTimeout
		if v := os.Getenv(envZKSessionTimeout); strings.TrimSpace(v) != "" {
			if c.timeout, err = time.ParseDuration(strings.TrimSpace(v)); err != nil {
				return c, &usageError{fmt.Sprintf("%s %q: want a Go duration such as 10s", envZKSessionTimeout, v)}
			}
		}
	}
	if c.timeout < sd.MinSessionTimeout || c.timeout > sd.MaxSessionTimeout {
		return c, &usageError{fmt.Sprintf("-timeout / %s %v: allowed %v to %v", envZKSessionTimeout, c.timeout, sd.MinSessionTimeout, sd.MaxSessionTimeout)}
	}

	if auth := pick("auth", f.auth, envZKAuth); auth != "" {
		u, p, ok := strings.Cut(auth, ":")
		if !ok || u == "" {
			return c, &usageError{"-auth / " + envZKAuth + " (redacted): want user:password with a non-empty user"}
		}
		c.user, c.password = u, p
	}

	if c.sec, err = f.security(pick); err != nil {
		return c, err
	}

	c.basePath = pick("base-path", f.basePath, envBasePath)
	if c.basePath == "" {
		c.basePath = sd.DefaultBasePath
	}
	if sd.CheckRegistrarOptions(sd.BasePath(c.basePath)) != nil { // the library's one path check
		return c, &usageError{fmt.Sprintf("-base-path / %s %q: want an absolute ZooKeeper path such as %s", envBasePath, c.basePath, sd.DefaultBasePath)}
	}
	return c, nil
}

// parseCommand parses a command's flags and arguments and resolves the
// configuration; it checks that there are between min and max arguments.
func parseCommand(fs *flag.FlagSet, f *commonFlags, args []string, min, max int) ([]string, config, error) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		if err == flag.ErrHelp {
			return nil, config{}, err
		}
		return nil, config{}, &usageError{err.Error()} // the flag package printed the usage
	}
	if len(pos) < min || len(pos) > max {
		fs.Usage()
		return nil, config{}, &usageError{fmt.Sprintf("%s: wrong number of arguments (%d)", fs.Name(), len(pos))}
	}
	for _, p := range pos {
		if !sd.ValidNodeName(p) {
			return nil, config{}, &usageError{fmt.Sprintf("service %q: want a node name without '/'", p)}
		}
	}
	c, err := f.resolve(fs)
	return pos, c, err
}

// security reads the -tls-* and -sasl-* flags and their variables, and
// checks the files now: a missing or malformed one is a usage error that
// names it.
func (f *commonFlags) security(pick func(flagName, flagValue, env string) string) (*zkconn.Layer, error) {
	var sec zkconn.Security
	ca, cert, key := pick("tls-ca", f.tlsCA, envTLSCA), pick("tls-cert", f.tlsCert, envTLSCert), pick("tls-key", f.tlsKey, envTLSKey)
	name, minV := pick("tls-server-name", f.tlsServerName, envTLSServerName), pick("tls-min-version", f.tlsMinVersion, envTLSMinVersion)
	if ca != "" || cert != "" || key != "" || name != "" || minV != "" {
		v, err := zkconn.ParseVersion(minV)
		if err != nil {
			return nil, &usageError{fmt.Sprintf("-tls-min-version / %s %q: want 1.2 or 1.3", envTLSMinVersion, minV)}
		}
		sec.TLS = &zkconn.TLS{CAFile: ca, CertFile: cert, KeyFile: key, ServerName: name, MinVersion: v}
	}
	user, password := pick("sasl-user", f.saslUser, envSASLUser), pick("sasl-password", f.saslPassword, envSASLPassword)
	switch {
	case user != "" && password == "":
		return nil, &usageError{fmt.Sprintf("-sasl-user %q without a password: set %s (or -sasl-password)", user, envSASLPassword)}
	case user == "" && password != "":
		return nil, &usageError{"a SASL password without a user: set -sasl-user or " + envSASLUser}
	case user != "":
		sec.SASL = &zkconn.SASL{User: user, Password: zkconn.Secret(password)}
	}
	l, err := zkconn.New(sec)
	if err != nil {
		return nil, &usageError{strings.Replace(err.Error(), "zkconn: ", "", 1)}
	}
	return l, nil
}
