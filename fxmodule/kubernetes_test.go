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

	"github.com/gracekit/gracekit/fxmodule"
)

// envEntry is one "- name: GRACEKIT_..." of a manifest's env list.
type envEntry struct {
	name      string
	value     string // a literal value, "" with valueFrom
	fieldPath string // the downward API field, with valueFrom.fieldRef
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
	}
	if len(out) == 0 {
		t.Fatal("docs/KUBERNETES.md has no ```yaml block")
	}
	return out
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

// Every GRACEKIT_* name the Kubernetes doc's manifests use is one
// ConfigFromEnv reads, and every value they set is one it accepts. The
// names are not listed here: a variable added to ConfigFromEnv is allowed
// in the manifest as soon as it reads it.
func TestKubernetesManifestUsesOnlyVariablesConfigFromEnvReads(t *testing.T) {
	// Values to try for a variable set from a Secret or the downward API:
	// one of them parses for every kind of field (text, list, duration,
	// port, key=value pairs).
	samples := []string{"7", "7s", "k=v", "sample-value-of-16-bytes", "http://gw.example:8080/gracekit/flush"}
	for i, m := range manifests(t) {
		literal := map[string]string{}
		for _, e := range m.env {
			if e.value != "" {
				literal[e.name] = e.value
			}
		}
		seen := map[string]bool{}
		for _, name := range m.names {
			if seen[name] {
				continue
			}
			seen[name] = true
			values, strict := samples, false
			if v, ok := literal[name]; ok {
				values, strict = []string{v}, true
			}
			ok, err := reads(t, name, values, strict)
			if !ok {
				t.Errorf("manifest %d: ConfigFromEnv does not read %s=%q (err: %v)", i+1, name, values, err)
			}
		}
	}
}

// The manifest says what the doc says: the downward API gives the address
// and the id, the grace period exceeds the stop budget with a margin,
// there is no preStop hook, and the probes are the module's.
func TestKubernetesDeploymentMatchesTheDoc(t *testing.T) {
	all := manifests(t)
	dep := all[0]
	fields := map[string]string{}
	for _, e := range dep.env {
		fields[e.name] = e.fieldPath
	}
	if got := fields[fxmodule.EnvAddress]; got != "status.podIP" {
		t.Errorf("%s comes from %q, want status.podIP", fxmodule.EnvAddress, got)
	}
	if got := fields[fxmodule.EnvInstanceID]; got != "metadata.name" {
		t.Errorf("%s comes from %q, want metadata.name", fxmodule.EnvInstanceID, got)
	}

	clearGracekitEnv(t)
	for _, e := range dep.env {
		if e.value != "" {
			t.Setenv(e.name, e.value)
		}
	}
	cfg, err := fxmodule.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	budget := cfg.StopTimeout
	if budget == 0 {
		budget = fxmodule.DefaultStopTimeout
	}
	m := yamlInt("terminationGracePeriodSeconds").FindStringSubmatch(dep.text)
	if m == nil {
		t.Fatal("the Deployment sets no terminationGracePeriodSeconds")
	}
	grace, _ := strconv.Atoi(m[1])
	if margin := 5 * time.Second; time.Duration(grace)*time.Second < budget+margin {
		t.Errorf("terminationGracePeriodSeconds %d is under the stop budget %v plus %v", grace, budget, margin)
	}

	for i, mf := range all {
		if regexp.MustCompile(`(?m)^\s*preStop:`).MatchString(mf.text) {
			t.Errorf("manifest %d has a preStop hook", i+1)
		}
		// The registered port is one the container exposes.
		var port string
		for _, e := range mf.env {
			if e.name == fxmodule.EnvPort {
				port = e.value
			}
		}
		if port != "" && !regexp.MustCompile(`containerPort:\s*`+regexp.QuoteMeta(port)+`\b`).MatchString(mf.text) {
			t.Errorf("manifest %d: %s=%s is no containerPort", i+1, fxmodule.EnvPort, port)
		}
	}
	for _, want := range []string{"readinessProbe:\n            httpGet:\n              path: /readyz", "livenessProbe:\n            httpGet:\n              path: /livez"} {
		if !strings.Contains(dep.text, want) {
			t.Errorf("the Deployment lacks %q", want)
		}
	}
}
