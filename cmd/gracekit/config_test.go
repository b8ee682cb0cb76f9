package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
)

// The tool spells the library's variable names itself (config.go says
// why); this keeps them the ones fxmodule.ConfigFromEnv reads.
func TestEnvNamesAreTheLibrarys(t *testing.T) {
	tests := []struct{ give, want string }{
		{envZKServers, fxmodule.EnvZKServers},
		{envZKSessionTimeout, fxmodule.EnvZKSessionTimeout},
		{envZKAuth, fxmodule.EnvZKAuth},
		{envTLSCA, fxmodule.EnvZKTLSCA},
		{envTLSCert, fxmodule.EnvZKTLSCert},
		{envTLSKey, fxmodule.EnvZKTLSKey},
		{envTLSServerName, fxmodule.EnvZKTLSServerName},
		{envTLSMinVersion, fxmodule.EnvZKTLSMinVersion},
		{envSASLUser, fxmodule.EnvZKSASLUser},
		{envSASLPassword, fxmodule.EnvZKSASLPassword},
		{envBasePath, fxmodule.EnvBasePath},
	}
	for _, tt := range tests {
		if tt.give != tt.want {
			t.Errorf("gracekit reads %s where the library reads %s", tt.give, tt.want)
		}
	}
	// And ConfigFromEnv reads them into the fields the tool uses.
	t.Setenv(envZKServers, "zk1:2181/chroot")
	t.Setenv(envZKSessionTimeout, "7s")
	t.Setenv(envZKAuth, "u:p")
	t.Setenv(envBasePath, "/elsewhere")
	c, err := fxmodule.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if c.ZKServers != "zk1:2181/chroot" || c.ZKSessionTimeout != 7*time.Second || c.ZKAuth != "u:p" || c.BasePath != "/elsewhere" {
		t.Fatalf("ConfigFromEnv read %+v", c)
	}
}

func TestUsageAndConfigurationErrorsExitTwo(t *testing.T) {
	for _, env := range []string{envZKServers, envZKSessionTimeout, envZKAuth, envBasePath} {
		t.Setenv(env, "")
	}
	zk := []string{"-zk", "127.0.0.1:2181"}
	tests := []struct {
		name string
		give []string
		env  map[string]string
		want string // in stderr
	}{
		{name: "no command", give: nil, want: "usage: gracekit"},
		{name: "an unknown command", give: []string{"rm"}, want: `unknown command "rm"`},
		{name: "no ZooKeeper named", give: []string{"ls"}, want: envZKServers},
		{name: "a bad connect string", give: []string{"ls", "-zk", "zk1:99999"}, want: "-zk"},
		{name: "a bad output format", give: append([]string{"ls", "-o", "yaml"}, zk...), want: "text or json"},
		{name: "a session timeout out of range", give: append([]string{"ls", "-timeout", "1ms"}, zk...), want: "allowed"},
		{name: "a malformed session timeout in the environment", give: append([]string{"ls"}, zk...),
			env: map[string]string{envZKSessionTimeout: "soon"}, want: envZKSessionTimeout},
		{name: "credentials without a user", give: append([]string{"ls", "-auth", "secret"}, zk...), want: "user:password"},
		{name: "a relative base path", give: append([]string{"ls", "-base-path", "services"}, zk...), want: "absolute"},
		{name: "a base path from the environment with a trailing slash", give: append([]string{"ls"}, zk...),
			env: map[string]string{envBasePath: "/services/"}, want: envBasePath},
		{name: "two services to ls", give: append([]string{"ls", "a", "b"}, zk...), want: "wrong number of arguments"},
		{name: "watch with two services", give: append([]string{"watch", "a", "b"}, zk...), want: "wrong number of arguments"},
		{name: "an unknown layout", give: append([]string{"ls", "-layout", "etcd"}, zk...), want: "-layout"},
		{name: "an unknown status to list", give: append([]string{"ls", "-status", "DOWN"}, zk...), want: "-status"},
		{name: "a service name with a slash", give: append([]string{"watch", "a/b"}, zk...), want: "without '/'"},
		{name: "a negative -for", give: append([]string{"watch", "a", "-for", "-1s"}, zk...), want: "-for"},
		{name: "an unknown finding kind to ignore", give: append([]string{"check", "-ignore", "typos"}, zk...), want: "-ignore"},
		{name: "a buffer ratio above one", give: append([]string{"check", "-buffer-ratio", "2"}, zk...), want: "-buffer-ratio"},
		{name: "an unknown flag", give: append([]string{"ls", "-verbose"}, zk...), want: "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name+" exits 2", func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			code, _, stderr := gk(t, tt.give...)
			if code != exitUsage || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, exitUsage, tt.want)
			}
		})
	}
	t.Run("help exits 0", func(t *testing.T) {
		if code, out, _ := gk(t, "help"); code != exitOK || !strings.Contains(out, "watch [service]") || !strings.Contains(out, "drain <service> <id>") {
			t.Fatalf("exit %d, %q", code, out)
		}
		if code, _, stderr := gk(t, "ls", "-h"); code != exitOK || !strings.Contains(stderr, "-base-path") {
			t.Fatalf("ls -h: exit %d, %q", code, stderr)
		}
	})
}

// Every connection refused: exit 2 at once, naming the address tried, not
// after -timeout (issue 32).
func TestNoServerExitsTwoWithinTheTimeout(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t) // nothing listens there
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for _, cmd := range [][]string{{"ls"}, {"watch", "quote"}, {"check"}} {
		start := time.Now()
		code, _, stderr := gk(t, append(cmd, "-zk", addr, "-timeout", "5s")...)
		if code != exitUsage || !strings.Contains(stderr, "refused the connection") || !strings.Contains(stderr, addr) {
			t.Fatalf("%v: exit %d, %q", cmd, code, stderr)
		}
		if d := time.Since(start); d >= 5*time.Second {
			t.Fatalf("%v: waited out -timeout (%v) although every connection was refused", cmd, d)
		}
	}
}

func TestEnvironmentIsReadAndFlagsWin(t *testing.T) {
	c := zkServer(t)
	cl := newClient(t, c)
	base := basePath("env-base")
	register(t, cl, base, sd.Instance{Name: "quote", ID: "q1", Address: "127.0.0.1", Port: 8080})
	t.Setenv(envZKServers, c.ConnectString())
	t.Setenv(envBasePath, base)
	t.Setenv(envZKSessionTimeout, "3s")
	t.Setenv(envZKAuth, "")

	services := func(args ...string) []string {
		t.Helper()
		code, out, stderr := gk(t, append([]string{"ls", "-o", "json"}, args...)...)
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var got lsOutput
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range got.Services {
			names = append(names, s.Name)
		}
		return names
	}
	if got := services(); len(got) != 1 || got[0] != "quote" {
		t.Fatalf("from the environment: services %v, want [quote]", got)
	}
	// -base-path wins over the environment: a base path that does not
	// exist is said so (issue 22), not listed as an empty registry.
	if code, _, stderr := gk(t, "ls", "-base-path", "/nothing-here"); code != exitUsage || !strings.Contains(stderr, "/nothing-here does not exist") {
		t.Fatalf("-base-path over the environment: exit %d, %q; want 2 and the base path named", code, stderr)
	}
	// A chroot in the connect string: the base path is inside it.
	if got := services("-zk", c.ConnectString()+base, "-base-path", "/quote"); len(got) != 1 || got[0] != "q1" {
		t.Fatalf("with a chroot: services %v, want [q1] (the instance node, seen as a service)", got)
	}
}
