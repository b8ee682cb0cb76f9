package provider_test

import (
	"context"
	"io"
	"net"
	"net/http"
	pathpkg "path"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/assemblytest"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

func nodeOf(t *testing.T, conn testutil.ZK, p string) (sd.Instance, *zk.Stat) {
	t.Helper()
	data, stat, err := conn.Get(p)
	if err != nil {
		return sd.Instance{}, nil
	}
	inst, err := sd.CuratorCodec{}.Decode("quote", pathpkg.Base(p), data)
	if err != nil {
		t.Fatal(err)
	}
	return inst, stat
}

// Issue 22: an operator's drain (gracekit drain, the CLI an operator
// runs) takes a provider out of rotation under load: its node
// OUT_OF_SERVICE, its gateways flushed, no request reaches it once the
// flush was acknowledged, none fails; its Registrar and its passing
// health check keep it out, through a session expiry, until gracekit
// undrain, which brings it back.
func TestAnOperatorDrainHoldsUntilUndrained(t *testing.T) {
	t.Parallel()
	zkc := ownZK(t)
	cli := testutil.BuildCLI(t)
	conn := testutil.ZKConn(t, zkc.Addrs())
	gw := startGateway(t, zkc)
	startProvider(t, zkc, "p2", []string{gw.url})

	rec := zktest.NewSessionRecorder()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := sd.NewSession(zkc.ConnectString(), sd.SessionTimeout(4*time.Second), sd.Dialer(rec.Dial))
	if err != nil {
		t.Fatal(err)
	}
	var served, checks atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/work", func(w http.ResponseWriter, _ *http.Request) {
		served.Add(1)
		time.Sleep(2 * time.Millisecond)
		_, _ = io.WriteString(w, "p1")
	})
	p1 := assemblytest.StartProvider(t, sess, provider.Config{
		Instance:    sd.Instance{Name: "quote", ID: "p1", Address: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port},
		Server:      &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		Listener:    ln,
		Flush:       provider.Flush{Secret: secret, Targets: []string{gw.url}},
		QuietWindow: 100 * time.Millisecond,
		Health: provider.HealthCheck{Check: func(context.Context) error { checks.Add(1); return nil },
			Interval: 20 * time.Millisecond, Timeout: instantCheckTimeout, Passes: 1, Hold: time.Millisecond},
	})
	path := "/services/quote/p1"

	load := testutil.StartLoad(4, gw.call)
	defer load.Stop()
	testutil.WaitFor(t, "p1 serving", func() bool { return served.Load() > 20 })

	cli.Run(t, "drain", "quote", "p1", "-zk", zkc.ConnectString())
	testutil.WaitFor(t, "p1 out of rotation by the operator, its gateways flushed", func() bool {
		h := p1.Health()
		return len(h) == 1 && !h[0].Healthy && h[0].By == provider.ByOperator && !h[0].Done.IsZero()
	})
	if h := p1.Health()[0]; h.Err != nil {
		t.Fatalf("drain transition %+v: the flush failed", h)
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+p1.Addr().String()+"/readyz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Close = true // no idle connection left for goleak
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// Issue 32: it says why it is out.
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "drained by operator") {
		t.Fatalf("/readyz of a drained instance: %d %q, want 503 drained by operator", resp.StatusCode, body)
	}
	if p1.Registrar().DrainedBy() != sd.DrainedByOperator {
		t.Fatal("the Registrar does not know it is drained")
	}
	after, c := served.Load(), checks.Load()
	// Passing health checks try to write UP meanwhile; none may.
	testutil.WaitFor(t, "ten passing health checks", func() bool { return checks.Load() > c+10 })
	if inst, _ := nodeOf(t, conn, path); inst.Status() != sd.StatusOutOfService || inst.Metadata[sd.MetadataDrainedBy] != sd.DrainedByOperator {
		t.Fatalf("node while drained: %+v", inst.Metadata)
	}
	if n := served.Load() - after; n != 0 {
		t.Fatalf("p1 served %d requests after its drain's flush was acknowledged", n)
	}

	// A session expiry: the node is re-created, still drained.
	_, before := nodeOf(t, conn, path)
	id := rec.LastSession()
	expired := false
	for _, a := range zkc.Addrs() {
		if rec.Expire(a, id) == nil {
			expired = true
		}
	}
	if !expired {
		t.Fatal("no server expired p1's session")
	}
	testutil.WaitFor(t, "p1's node re-created in a new session", func() bool {
		_, st := nodeOf(t, conn, path)
		return st != nil && st.Czxid != before.Czxid
	})
	if inst, _ := nodeOf(t, conn, path); inst.Status() != sd.StatusOutOfService || inst.Metadata[sd.MetadataDrainedBy] != sd.DrainedByOperator {
		t.Fatalf("node re-created after the expiry: %+v, want still drained", inst.Metadata)
	}
	if n := served.Load() - after; n != 0 {
		t.Fatalf("p1 served %d requests while drained", n)
	}

	cli.Run(t, "undrain", "quote", "p1", "-zk", zkc.ConnectString())
	testutil.WaitFor(t, "p1 UP again", func() bool {
		inst, _ := nodeOf(t, conn, path)
		return inst.Status() == sd.StatusUp
	})
	testutil.WaitFor(t, "p1 back by the operator", func() bool {
		h := p1.Health()
		return len(h) == 2 && h[1].Healthy && h[1].By == provider.ByOperator
	})
	back := served.Load()
	testutil.WaitFor(t, "p1 gets traffic again", func() bool { return served.Load() > back+20 })
	if n := load.Failed(); n != 0 {
		t.Fatalf("%d requests failed; first: %v", n, load.FirstErr())
	}
}
