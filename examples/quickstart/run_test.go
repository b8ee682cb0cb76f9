package quickstart_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/zktest"
)

// freshModule writes the README's programs, as the page shows them, into a
// new module whose go.mod has only a require and a replace of the library
// to this checkout (the checkout's go.sum spares a download of what it
// already lists), runs go mod tidy and builds them: it returns the
// binaries by quickstart name (provider, gateway, grpc, byhand, consumer,
// plainprovider).
func freshModule(t *testing.T, dir string) map[string]string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fs := files(t)
	for _, block := range programs(t) {
		name := ""
		for p, src := range fs {
			if src == block {
				name = filepath.Dir(p)
			}
		}
		if name == "" {
			t.Fatal("a README program is none of the quickstart files (TestREADMEProgramsAreTheQuickstartFiles says which)")
		}
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "main.go"), []byte(block), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goVersion := ""
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mod), "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			goVersion = v
		}
	}
	// The library at the examples module's version: -trimpath names its
	// files by module@version, so any other would compile it all again.
	gomod := fmt.Sprintf("module example.com/readme\n\ngo %s\n\nrequire github.com/gracekit/gracekit v0.0.0-00010101000000-000000000000\n\nreplace github.com/gracekit/gracekit => %s\n", goVersion, root)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		// None of the environment's GOFLAGS but the flags that built this
		// test (-race, -trimpath, -ldflags), so that the build reuses its compile.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS="+testutil.GoFlags())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s in a fresh module with only a replace to the checkout: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("mod", "tidy")
	run("vet", "./...")
	run("build", "-o", "bin/", "./...")
	bins := map[string]string{}
	for p := range fs {
		name := filepath.Dir(p)
		bins[name] = filepath.Join(dir, "bin", name)
	}
	return bins
}

// readme holds the README's programs built once for this test binary
// (freshModule) in a directory TestMain removes: the tests that run them
// share one module, one tidy and one link of each.
var readme struct {
	sync.Mutex
	dir  string
	bins map[string]string
}

func readmeBinaries(t *testing.T) map[string]string {
	t.Helper()
	readme.Lock()
	defer readme.Unlock()
	if readme.bins == nil {
		readme.bins = freshModule(t, readme.dir)
	}
	return readme.bins
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gracekit-quickstart-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	readme.dir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// readmeEnv is the environment the README's shell block sets for
// `go run ./quickstart/<name>`, with the test's ZooKeeper for
// GRACEKIT_ZK_SERVERS and free ports for the *_PORT variables (the
// README's are taken, most likely, on a shared machine).
func readmeEnv(t *testing.T, name, zkServers string) []string {
	t.Helper()
	text := strings.ReplaceAll(string(pages(t)), "\\\n", " ")
	var env []string
	cmd := "go run ./quickstart/" + name
	for _, line := range strings.Split(text, "\n") {
		i := strings.Index(line, cmd)
		if i < 0 {
			continue
		}
		if rest := line[i+len(cmd):]; rest != "" && !strings.ContainsAny(rest[:1], " `)") {
			continue // another program whose name starts with name's
		}
		before := line[:i]
		if j := strings.LastIndex(before, "`"); j >= 0 {
			before = before[j+1:] // inline code in a sentence
		}
		for _, f := range strings.Fields(before) {
			k, v, ok := strings.Cut(f, "=")
			if !ok || !strings.HasPrefix(k, "GRACEKIT_") {
				continue
			}
			switch {
			case k == "GRACEKIT_ZK_SERVERS":
				v = zkServers
			case strings.HasSuffix(k, "_PORT"):
				v = strconv.Itoa(testutil.FreePort(t))
			}
			env = append(env, k+"="+v)
		}
		break
	}
	if len(env) == 0 {
		t.Fatalf("README.md and docs/ show no `GRACEKIT_...=... go run ./quickstart/%s`", name)
	}
	return env
}

func envValue(env []string, k string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, k+"="); ok {
			return v
		}
	}
	return ""
}

// process is a quickstart binary running with the README's environment.
type process struct {
	cmd  *exec.Cmd
	out  bytes.Buffer  // stdout and stderr; read once done is closed
	done chan struct{} // closed when the process was waited for
	err  error         // Wait's
}

func start(t *testing.T, bin string, env []string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out // Wait waits for exec's copying
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	return p
}

// stop sends SIGTERM and wants exit 0 within the stop's time.
func (p *process) stop(t *testing.T, what string) string {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			t.Fatalf("%s after SIGTERM: %v\n%s", what, p.err, p.out.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("%s did not exit within 40s of SIGTERM", what)
	}
	return p.out.String()
}

func registered(t *testing.T, conn testutil.ZK, service string) []string {
	t.Helper()
	ids, _, err := conn.Children("/services/" + service)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	return ids
}

// Issue 23: every program of the README builds, as the page shows it, in
// a reader's fresh module with only a replace to the checkout; each
// quickstart, run with the variables its README block names, registers,
// serves (the gateway routes to the provider, byhand calls it once, the
// gRPC provider answers its RPC and the standard health service, the
// plain-Go provider serves beside the fx one) and leaves on SIGTERM, exit
// 0, its node gone, its stop summed up in one line; run with nothing set,
// the HTTP provider exits 1 naming what to set.
func TestQuickstartsRunAsTheREADMESays(t *testing.T) {
	bins := readmeBinaries(t)
	zkc := zktest.New(t)
	conn := testutil.ZKConn(t, zkc.Addrs())

	bare := exec.Command(bins["provider"])
	bare.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	out, err := bare.CombinedOutput()
	if code := bare.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), "GRACEKIT_ZK_SERVERS") {
		t.Fatalf("provider with nothing set: exit %d (%v), output %q; want 1 naming GRACEKIT_ZK_SERVERS", code, err, out)
	}
	// Issue 32: fx's own events go to slog at debug, so the ConfigError is
	// the first line a user sees, not the twentieth below [Fx] lines.
	if first, _, _ := strings.Cut(string(out), "\n"); !strings.Contains(first, "GRACEKIT_ZK_SERVERS") || strings.Contains(string(out), "[Fx]") {
		t.Fatalf("provider with nothing set: the first line is %q, want the ConfigError naming GRACEKIT_ZK_SERVERS (and no [Fx] lines):\n%s", first, out)
	}

	penv := readmeEnv(t, "provider", zkc.ConnectString())
	prov := start(t, bins["provider"], penv)
	testutil.WaitFor(t, "the provider registered", func() bool { return len(registered(t, conn, "quote")) == 1 })
	resp, err := http.Get("http://127.0.0.1:" + envValue(penv, "GRACEKIT_PORT") + "/quote?symbol=ABC")
	if err != nil {
		t.Fatal(err)
	}
	var quote map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&quote)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || quote["symbol"] != "ABC" {
		t.Fatalf("GET /quote: %d %v", resp.StatusCode, quote)
	}

	genv := readmeEnv(t, "gateway", zkc.ConnectString())
	gw := start(t, bins["gateway"], genv)
	testutil.WaitFor(t, "the gateway registered", func() bool { return len(registered(t, conn, "gateway")) == 1 })
	testutil.WaitFor(t, "the gateway routes GET /price to the provider", func() bool {
		resp, err := http.Get("http://127.0.0.1:" + envValue(genv, "GRACEKIT_PORT") + "/price?symbol=ABC")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var got map[string]any
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&got) == nil && got["price"] == 12.34
	})

	by := exec.Command(bins["byhand"])
	by.Env = append(os.Environ(), readmeEnv(t, "byhand", zkc.ConnectString())...)
	if out, err := by.CombinedOutput(); err != nil || !strings.Contains(string(out), "12.34") {
		t.Fatalf("byhand: %v\n%s", err, out)
	}

	renv := readmeEnv(t, "grpc", zkc.ConnectString())
	rp := start(t, bins["grpc"], renv)
	svc := envValue(renv, "GRACEKIT_SERVICE")
	testutil.WaitFor(t, "the gRPC provider registered", func() bool { return len(registered(t, conn, svc)) == 1 })
	cc, err := grpc.NewClient(net.JoinHostPort("127.0.0.1", envValue(renv, "GRACEKIT_GRPC_PORT")), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	price := new(wrapperspb.DoubleValue)
	if err := cc.Invoke(ctx, "/quote.Quotes/Get", wrapperspb.String("ABC"), price); err != nil || price.Value != 12.34 {
		t.Fatalf("quote.Quotes/Get: %v, %v", price, err)
	}
	// The start marks the instance ready right after it registered: the
	// node can be seen a moment before SERVING (once, in make test).
	var health *healthpb.HealthCheckResponse
	testutil.WaitFor(t, "the gRPC provider's health SERVING", func() bool {
		var err error
		health, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && health.Status == healthpb.HealthCheckResponse_SERVING
	})

	// The plain-Go consumer calls both: quote over HTTP, quote-grpc through
	// grpcresolver, and stops its ClientConn before its consumer.
	if svc != "quote-grpc" {
		t.Fatalf("the gRPC quickstart registers %q; the plain-Go consumer dials quote-grpc", svc)
	}
	cons := exec.Command(bins["consumer"])
	cons.Env = append(os.Environ(), readmeEnv(t, "consumer", zkc.ConnectString())...)
	if out, err := cons.CombinedOutput(); err != nil || !strings.Contains(string(out), "http: map[price:12.34") || !strings.Contains(string(out), "grpc: 12.34") {
		t.Fatalf("consumer: %v\n%s", err, out)
	} else if !strings.Contains(string(out), "INFO instances changed component=consumer service=quote count=1 added=") {
		t.Errorf("the plain-Go consumer logged no change of quote's instances:\n%s", out)
	}

	// Issue 39, item 6: the plain-Go provider, run as docs/PLAIN-GO.md
	// runs it, registers beside the fx one and serves; at SIGTERM it says
	// the signal, flushes the gateway, leaves, and sums the stop up.
	ppenv := readmeEnv(t, "plainprovider", zkc.ConnectString())
	pp := start(t, bins["plainprovider"], ppenv)
	testutil.WaitFor(t, "the plain-Go provider registered", func() bool { return len(registered(t, conn, "quote")) == 2 })
	resp, err = http.Get("http://127.0.0.1:" + envValue(ppenv, "GRACEKIT_PORT") + "/quote?symbol=XYZ")
	if err != nil {
		t.Fatal(err)
	}
	quote = nil
	_ = json.NewDecoder(resp.Body).Decode(&quote)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || quote["symbol"] != "XYZ" {
		t.Fatalf("GET /quote on the plain-Go provider: %d %v", resp.StatusCode, quote)
	}
	logs := pp.stop(t, "the plain-Go provider")
	if ids := registered(t, conn, "quote"); len(ids) != 1 {
		t.Errorf("after the plain-Go provider's stop, quote has %v registered, want the fx provider's only", ids)
	}
	if !strings.Contains(logs, "INFO signal received; stopping signal=SIGTERM") || !stopSummed(logs, "flush=") {
		t.Errorf("the plain-Go provider's stop: want the signal's line, then a 'stop done' line with errors=0 and a flush step:\n%s", logs)
	}

	for _, p := range []struct {
		what, service string
		p             *process
	}{{"the gRPC provider", svc, rp}, {"the gateway", "gateway", gw}, {"the provider", "quote", prov}} {
		logs := p.p.stop(t, p.what)
		if ids := registered(t, conn, p.service); len(ids) != 0 {
			t.Errorf("%s left %v registered", p.what, ids)
		}
		if !strings.Contains(logs, "registered") || !strings.Contains(logs, "deregistered") {
			t.Errorf("%s logged no registered/deregistered line through slog.Default():\n%s", p.what, logs)
		}
		// Issue 39, items 5 and 6: fxmodule.Logger says the signal at
		// info, and fx's own events stay out of the way.
		if !strings.Contains(logs, "INFO signal received; stopping signal=SIGTERM") || !stopSummed(logs, "session=") || strings.Contains(logs, "[Fx]") {
			t.Errorf("%s's stop: want the signal's line and a 'stop done' line with errors=0, no [Fx] lines:\n%s", p.what, logs)
		}
	}
}

// stopSummed reports whether logs have a "stop done" line with errors=0
// whose steps include step.
func stopSummed(logs, step string) bool {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "INFO stop done ") && strings.Contains(l, " errors=0") && strings.Contains(l, step) {
			return true
		}
	}
	return false
}
