package fxmodule_test

import (
	"errors"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/provider"
)

// envEntry is one "- name: GRACEKIT_..." of a manifest's env list.
type envEntry struct {
	name      string
	value     string // a literal value, "" with valueFrom
	fieldPath string // the downward API field, with valueFrom.fieldRef
	secretKey string // the Secret's key, with valueFrom.secretKeyRef
}

// manifest is what the test reads from one ```yaml block.
type manifest struct {
	text  string
	names []string // every GRACEKIT_* name in the block, comments included
	env   []envEntry
}

var (
	gracekitName = regexp.MustCompile(`GRACEKIT_[A-Z0-9_]+`)
	envName      = regexp.MustCompile(`^\s*-\s*name:\s*(GRACEKIT_[A-Z0-9_]+)\s*$`)
	listItem     = regexp.MustCompile(`^\s*-\s`)
	envValue     = regexp.MustCompile(`^\s*value:\s*"?([^"#]*?)"?\s*(#.*)?$`)
	envField     = regexp.MustCompile(`^\s*fieldPath:\s*(\S+)`)
	envSecretKey = regexp.MustCompile(`^\s*key:\s*(\S+)`)
	yamlInt      = func(key string) *regexp.Regexp { return regexp.MustCompile(`(?m)^\s*` + key + `:\s*(\d+)`) }
)

// manifests reads the ```yaml blocks of docs/KUBERNETES.md. A line scan
// is enough for the env lists the doc writes (one key per line), and the
// library takes no YAML dependency for a test.
func manifests(t *testing.T) []manifest {
	t.Helper()
	doc, err := os.ReadFile("../docs/KUBERNETES.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []manifest
	var cur *manifest
	var entry *envEntry
	for _, line := range strings.Split(string(doc), "\n") {
		switch {
		case cur == nil && strings.TrimSpace(line) == "```yaml":
			cur = &manifest{}
			continue
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, *cur)
			cur, entry = nil, nil
			continue
		case cur == nil:
			continue
		}
		cur.text += line + "\n"
		cur.names = append(cur.names, gracekitName.FindAllString(line, -1)...)
		if m := envName.FindStringSubmatch(line); m != nil {
			cur.env = append(cur.env, envEntry{name: m[1]})
			entry = &cur.env[len(cur.env)-1]
			continue
		}
		if listItem.MatchString(line) {
			entry = nil // another list's item: the env entry ended
			continue
		}
		if entry == nil {
			continue
		}
		if m := envValue.FindStringSubmatch(line); m != nil {
			entry.value = strings.TrimSpace(m[1])
		}
		if m := envField.FindStringSubmatch(line); m != nil {
			entry.fieldPath = m[1]
		}
		if m := envSecretKey.FindStringSubmatch(line); m != nil {
			entry.secretKey = m[1]
		}
	}
	if len(out) == 0 {
		t.Fatal("docs/KUBERNETES.md has no ```yaml block")
	}
	return out
}

// deployments are the manifests of kind Deployment, by metadata.name.
func deployments(t *testing.T) map[string]manifest {
	t.Helper()
	name := regexp.MustCompile(`(?m)^metadata:\n  name:\s*(\S+)`)
	out := map[string]manifest{}
	for i, m := range manifests(t) {
		if !regexp.MustCompile(`(?m)^kind: Deployment$`).MatchString(m.text) {
			if len(m.env) > 0 {
				t.Errorf("manifest %d sets GRACEKIT_* variables but is no whole Deployment: a pod's env cannot be read from it", i+1)
			}
			continue
		}
		n := name.FindStringSubmatch(m.text)
		if n == nil {
			t.Fatalf("manifest %d: a Deployment without metadata.name", i+1)
		}
		out[n[1]] = m
	}
	return out
}

// What the kubelet would put in the pod's env for valueFrom: the downward
// API's fields, and Secrets of the shape the doc's comments describe.
var (
	downwardStub = map[string]string{"status.podIP": "10.244.1.17", "metadata.name": "quote-5d8f7c9b6-x2x7q"}
	secretStub   = map[string]string{"auth": "quote:zk-password", "secret": "a-flush-secret-of-32-bytes-long!"}
)

// setPodEnv sets the process env to exactly what m's pod gets: every
// GRACEKIT_* variable of the test process unset, then m's entries.
func setPodEnv(t *testing.T, m manifest) {
	t.Helper()
	clearGracekitEnv(t)
	for _, e := range m.env {
		v := e.value
		switch {
		case e.fieldPath != "":
			var ok bool
			if v, ok = downwardStub[e.fieldPath]; !ok {
				t.Fatalf("%s: no stub for the downward API field %q", e.name, e.fieldPath)
			}
		case e.secretKey != "":
			var ok bool
			if v, ok = secretStub[e.secretKey]; !ok {
				t.Fatalf("%s: no stub for the Secret key %q", e.name, e.secretKey)
			}
		}
		t.Setenv(e.name, v)
	}
}

// apps are the fx apps the doc's Deployments run, by Deployment name: the
// quickstarts' shapes (examples/quickstart).
var apps = map[string]fx.Option{
	"quote":      fx.Options(fx.Provide(helloServer), fxmodule.Discovery),
	"quote-grpc": fx.Options(fx.Provide(newGRPCServer), fxmodule.Discovery),
	"gateway":    fx.Options(fx.Provide(helloServer), fxmodule.Discovery, fxmodule.Gateway),
}

// Each Deployment's env, as its pod gets it, builds the app it is for with
// FromEnv, and what the provider would register is the pod: its IP, its
// name, the container port. (A gRPC Deployment setting GRACEKIT_PORT
// instead of GRACEKIT_GRPC_PORT fails here: the pod would crash-loop.)
func TestKubernetesDeploymentsBuildTheirApps(t *testing.T) {
	deps := deployments(t)
	for name := range apps {
		if _, ok := deps[name]; !ok {
			t.Errorf("docs/KUBERNETES.md has no Deployment %q", name)
		}
	}
	for name, m := range deps {
		t.Run(name, func(t *testing.T) {
			app, ok := apps[name]
			if !ok {
				t.Fatalf("Deployment %q runs no app this test knows: add it to apps", name)
			}
			setPodEnv(t, m)
			var p *provider.Provider
			if err := fx.New(fx.NopLogger, fxmodule.FromEnv(), app, fx.Populate(&p)).Err(); err != nil {
				t.Fatalf("the pod's env does not build the app: %v", err)
			}
			inst := p.Instance()
			if inst.Address != downwardStub["status.podIP"] || inst.ID != downwardStub["metadata.name"] {
				t.Errorf("registers %s as %s, want the pod's IP %s and name %s", inst.ID, inst.Address, downwardStub["status.podIP"], downwardStub["metadata.name"])
			}
			if !regexp.MustCompile(`containerPort:\s*` + strconv.Itoa(inst.Port) + `\b`).MatchString(m.text) {
				t.Errorf("registers port %d, which is no containerPort of the Deployment", inst.Port)
			}
		})
	}
}

// The Deployments say what the doc says: the grace period exceeds the stop
// budget with a margin, no preStop hook, readiness that one slow probe
// does not fail, liveness that outlasts the drain, and providers that
// flush the gateway's service.
func TestKubernetesDeploymentsMatchTheDoc(t *testing.T) {
	deps := deployments(t)
	gateways := map[string]bool{}
	for _, m := range deps {
		if strings.Contains(m.text, "GRACEKIT_FLUSH_PATH") {
			for _, e := range m.env {
				if e.name == fxmodule.EnvService {
					gateways[e.value] = true
				}
			}
		}
	}
	if len(gateways) == 0 {
		t.Error("no gateway Deployment (one with GRACEKIT_FLUSH_PATH)")
	}
	for name, m := range deps {
		t.Run(name, func(t *testing.T) {
			setPodEnv(t, m)
			cfg, err := fxmodule.ConfigFromEnv()
			if err != nil {
				t.Fatal(err)
			}
			budget := cfg.StopTimeout
			if budget == 0 {
				budget = fxmodule.DefaultStopTimeout
			}
			g := yamlInt("terminationGracePeriodSeconds").FindStringSubmatch(m.text)
			if g == nil {
				t.Fatal("no terminationGracePeriodSeconds")
			}
			grace, _ := strconv.Atoi(g[1])
			if margin := 5 * time.Second; time.Duration(grace)*time.Second < budget+margin {
				t.Errorf("terminationGracePeriodSeconds %d is under the stop budget %v plus %v", grace, budget, margin)
			}
			if regexp.MustCompile(`(?m)^\s*preStop:`).MatchString(m.text) {
				t.Error("a preStop hook")
			}
			ready, live := probe(m.text, "readinessProbe"), probe(m.text, "livenessProbe")
			if ready == "" || live == "" {
				t.Fatal("a readiness or liveness probe is missing")
			}
			if n := probeInt(ready, "failureThreshold", 3); n < 2 {
				t.Errorf("readiness failureThreshold %d: one slow probe takes a serving pod out of its Services", n)
			}
			drain := cfg.DrainTimeout
			if drain == 0 {
				drain = 4 * time.Second // shutdown.DefaultDrainTimeout
			}
			if d := time.Duration(probeInt(live, "failureThreshold", 3)*probeInt(live, "periodSeconds", 10)) * time.Second; d <= drain {
				t.Errorf("liveness gives up after %v, within the drain's %v", d, drain)
			}
			if strings.Contains(ready, "grpc:") && !strings.Contains(live, "tcpSocket:") {
				t.Error("a gRPC readiness probe needs a tcpSocket liveness probe: the health service is NOT_SERVING for good once the stop began")
			}
			if !strings.Contains(m.text, "GRACEKIT_FLUSH_PATH") {
				for _, g := range cfg.FlushGateways {
					if !gateways[g] {
						t.Errorf("flushes gateway service %q, which no gateway Deployment registers", g)
					}
				}
				if len(cfg.FlushGateways) == 0 {
					t.Error("a provider that flushes no gateway")
				}
			}
		})
	}
}

// probe returns the lines of the named probe in a container spec.
func probe(text, name string) string {
	i := strings.Index(text, name+":")
	if i < 0 {
		return ""
	}
	lines := strings.Split(text[i:], "\n")
	indent := len(lines[0]) - len(strings.TrimLeft(lines[0], " "))
	out := lines[0] + "\n"
	for _, l := range lines[1:] {
		if strings.TrimSpace(l) != "" && len(l)-len(strings.TrimLeft(l, " ")) <= indent {
			break
		}
		out += l + "\n"
	}
	return out
}

// probeInt is a probe's integer field, or Kubernetes' default.
func probeInt(probe, key string, def int) int {
	if m := yamlInt(key).FindStringSubmatch(probe); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return def
}

// clearGracekitEnv unsets, for the test, every GRACEKIT_* variable of the
// process (an empty value is unset for ConfigFromEnv).
func clearGracekitEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "GRACEKIT_") {
			t.Setenv(k, "")
		}
	}
}

// reads tells whether ConfigFromEnv reads name: set to one of values, the
// Config it returns changes. A *ConfigError naming the variable says so
// too, unless strict (a value the manifest sets must be a good one).
func reads(t *testing.T, name string, values []string, strict bool) (bool, error) {
	t.Helper()
	clearGracekitEnv(t)
	base, err := fxmodule.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for _, v := range values {
		t.Setenv(name, v)
		got, err := fxmodule.ConfigFromEnv()
		var ce *fxmodule.ConfigError
		switch {
		case err == nil && !reflect.DeepEqual(got, base):
			return true, nil
		case errors.As(err, &ce) && ce.Env == name && !strict:
			return true, nil
		case err != nil:
			lastErr = err
		}
	}
	return false, lastErr
}

// Every GRACEKIT_* name in the doc's manifests, comments included, is one
// the library reads: a misspelt variable is set and silently ignored.
func TestKubernetesManifestsNameOnlyVariablesTheLibraryReads(t *testing.T) {
	samples := []string{"7", "7s", "k=v", "sample-value-of-16-bytes", "http://gw.example:8080/gracekit/flush"}
	for i, m := range manifests(t) {
		seen := map[string]bool{}
		for _, name := range m.names {
			if seen[name] {
				continue
			}
			seen[name] = true
			if ok, err := reads(t, name, samples, false); !ok {
				t.Errorf("manifest %d: ConfigFromEnv does not read %s (err: %v)", i+1, name, err)
			}
		}
	}
}
