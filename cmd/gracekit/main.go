// Command gracekit shows operators what a gracekit (or Curator / Spring
// Cloud Zookeeper) registry in ZooKeeper holds:
//
//	gracekit ls [service]      services and instances, one line each
//	gracekit watch [service]   changes as they happen, until interrupted
//	gracekit check [service]   lints the registry; exit 1 on findings
//	gracekit drain <service> <id>    takes an instance out of rotation, until
//	gracekit undrain <service> <id>  brings it back
//
// It reads the library's GRACEKIT_ZK_SERVERS, GRACEKIT_ZK_SESSION_TIMEOUT,
// GRACEKIT_ZK_AUTH and GRACEKIT_BASE_PATH, which flags override. Every
// command takes -o json. Exit status: 0 ok, 1 findings (check) or a named
// service that does not exist, 2 usage or connection errors, 3 drain
// refused (nothing changed). See README.md beside this file for the output formats.
//
// Install it with
//
//	go install github.com/gracekit/gracekit/cmd/gracekit@latest
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// A second signal kills the process the default way.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK       = 0
	exitFindings = 1 // check found something
	// exitNoService: a service named on the command line has no node. It
	// shares 1 with findings: the registry is not what was asked about,
	// where 2 says the command could not look.
	exitNoService = 1
	exitUsage     = 2 // bad usage, bad configuration, or ZooKeeper unreachable
	// exitRefused (3, drain.go): drain refused (-min-up, or a node it cannot mark); nothing changed
)

const usageText = `usage: gracekit <command> [flags] [args]

commands, each with its own flags:
  ls [service]       list services and instances (address, port, status, registration, owner session)
    -status UP|OUT_OF_SERVICE|MALFORMED|UNREADABLE
                     list only the instances with this status
  watch [service]    print changes to a service's instances (or every service's) as they happen, until SIGINT or -for;
                     a missing service exits 1 unless -wait, which waits for it
    -for duration    stop after this long (default: until SIGINT)
    -wait            wait for a service (or the base path) that does not exist yet instead of exiting 1 (2 for the base path)
  check [service]    lint the registry; exit 1 on findings
    -ignore kind,... finding kinds not to report: malformed, unreadable, not-ephemeral, duplicate-address,
                     open-acl, children-size, orphan-twin
    -max-buffer int  the clients' jute.maxbuffer in bytes (default 1048575)
    -buffer-ratio float
                     report a children list larger than this share of -max-buffer (default 0.75)
    -curator-base string
                     where the Curator nodes of go-kit twins are, when they stand apart (default: -base-path)
  drain <service> <id>    take an instance out of rotation (OUT_OF_SERVICE, drained_by=operator) until undrained
    -min-up int      refuse to leave fewer instances of the service UP than this (default 1);
                     the count and the drain are one atomic decision (one ZooKeeper multi)
    -force           drain even below -min-up
    -delete          drain a go-kit node (no status) by deleting it: back when its provider registers again
  undrain <service> <id>  bring a drained instance back, with the status it had before the drain

common flags (each defaults to the library's environment variable):
  -zk string         ZooKeeper connect string host:port,...[/chroot] ($GRACEKIT_ZK_SERVERS)
  -base-path string  parent of service nodes ($GRACEKIT_BASE_PATH, default /services)
  -auth string       digest credentials user:password ($GRACEKIT_ZK_AUTH)
  -timeout duration  session timeout, also the bound on connecting ($GRACEKIT_ZK_SESSION_TIMEOUT, default 10s)
  -layout auto|curator|gokit|mixed|plain
                     node layout: auto (default: Curator JSON and go-kit nodes, each read as
                     what it is), Curator JSON only, go-kit sd/zk nodes, both (a migration),
                     or data-less host:port nodes
  -o text|json       output format (default text); json is the stable form for scripts
  -tls-ca string     PEM CA bundle of the servers' certificates: TLS to the secureClientPort ($GRACEKIT_ZK_TLS_CA)
  -tls-cert string   PEM client certificate, for ssl.clientAuth=need ($GRACEKIT_ZK_TLS_CERT)
  -tls-key string    PEM key of -tls-cert ($GRACEKIT_ZK_TLS_KEY)
  -tls-server-name string
                     name checked against the servers' certificates ($GRACEKIT_ZK_TLS_SERVER_NAME, default each server's host)
  -tls-min-version 1.2|1.3
                     lowest TLS version ($GRACEKIT_ZK_TLS_MIN_VERSION, default 1.2)
  -sasl-user string  SASL DIGEST-MD5 user of the servers' JAAS Server section ($GRACEKIT_ZK_SASL_USER)
  -sasl-password string
                     its password; prefer $GRACEKIT_ZK_SASL_PASSWORD (a flag shows in the process list)

what a drain reaches, by layout:
  Curator JSON (gracekit, Curator, Spring nodes): every gracekit, Curator and Spring reader,
    and, through a gracekit provider's go-kit twin, which it deletes, go-kit consumers
  go-kit nodes: no status: drain -delete removes the node, back when its provider registers again
  gracekit's go-kit twins: drain the instance's Curator node; the twin follows it
  plain host:port nodes: no status; stop the instance instead

exit status: 0 done, 1 check found something or a named service does not exist
(watch -wait waits for it), 2 usage, configuration or connection error, 3 drain refused

"gracekit <command> -h" lists a command's own flags.
`

// run is the whole program: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	var cmd func(context.Context, []string, io.Writer, io.Writer) int
	switch args[0] {
	case "ls":
		cmd = runLs
	case "watch":
		cmd = runWatch
	case "check":
		cmd = runCheck
	case "drain":
		cmd = runDrain(false)
	case "undrain":
		cmd = runDrain(true)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usageText)
		return exitOK
	default:
		fmt.Fprintf(stderr, "gracekit: unknown command %q\n\n%s", args[0], usageText)
		return exitUsage
	}
	return cmd(ctx, args[1:], stdout, stderr)
}

// parseArgs parses flags wherever they are among the positional arguments
// ("ls quote -o json" as well as "ls -o json quote"); the flag package
// alone stops at the first positional one.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// After "--" everything is positional.
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// usageError is a mistake on the command line or in the environment.
type usageError struct{ msg string }

func (e *usageError) Error() string { return "gracekit: " + e.msg }

// fail prints err and returns its exit status: exitNoService for a named
// service that does not exist, exitUsage for anything else that stopped
// the command before it could look at the whole registry.
func fail(stderr io.Writer, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintln(stderr, err)
	if ns := (*noServiceError)(nil); errors.As(err, &ns) {
		return exitNoService
	}
	return exitUsage
}
