package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	pathpkg "path"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// countingLister counts the reads of the instance list as they begin.
type countingLister struct {
	lister
	reads atomic.Int64
}

func (l *countingLister) List(ctx context.Context) ([]target, error) {
	l.reads.Add(1)
	return l.lister.List(ctx)
}

// Issue 22, for the Spring-style cached gateway: gracekit drain, the CLI
// an operator runs, takes a provider out under load. Its drain flushes
// the gateway (GET /flushCache, as on a failed health check), which
// evicts it from the cached list at once, without reading ZooKeeper: no
// request the gateway routes after it answered the flush reaches the
// provider, none fails. The cache's TTL passing (the test's clock is the
// cache's, moved by a TTL at a time) re-reads the list, and the node,
// OUT_OF_SERVICE, stays out, also once an expiry of the provider's
// session re-created it; after gracekit undrain the next read takes it
// back.
func TestAnOperatorDrainEvictsFromTheCachedGateway(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t)
	cli := testutil.BuildCLI(t)
	conn := testutil.ZKConn(t, zkc.Addrs())

	const ttl = time.Hour // the cache reads ZooKeeper only when the test moves its clock
	var skew atomic.Int64
	src := &countingLister{lister: &zkLister{conn: conn.Conn, path: "/services/quote", service: "quote"}}
	c := newCache(src, ttl, newMetrics(), slog.New(slog.DiscardHandler))
	c.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	g := &gateway{cache: c, service: "quote", m: newMetrics(), client: newClient()}
	fw := &flushWatch{id: "q1"}
	gw := httptest.NewServer(fw.handler(g.mux()))
	t.Cleanup(gw.Close) // after the providers' stops, which flush it
	t.Cleanup(g.client.CloseIdleConnections)

	rec := zktest.NewSessionRecorder()
	q1 := startHealthProvider(t, zkc, "q1", gw.URL+"/flushCache", sd.SessionTimeout(4*time.Second), sd.Dialer(rec.Dial))
	q2 := startHealthProvider(t, zkc, "q2", gw.URL+"/flushCache")
	g.client.Transport = fw.transport(g.client.Transport, q1.Addr().String())
	path := "/services/quote/q1"

	// reread moves the cache's clock past its TTL and waits for the read
	// that the next request makes to succeed. A read that failed (ZooKeeper
	// slow to answer on a loaded machine) leaves the list stale, and the
	// next request reads again: only a fresh list is the read waited for.
	reread := func(what string) {
		t.Helper()
		// The clock moves while no read is under way: a read begun before
		// it (counted at its start) would end fresh past the new clock, and
		// the read waited for would never come (seen once: the first read
		// of both, 1 read in 30 s with the load running).
		var n int64
		testutil.WaitFor(t, "no read under way", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.loading != nil {
				return false
			}
			n = src.reads.Load()
			skew.Add(int64(ttl))
			return true
		})
		testutil.WaitFor(t, what, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return src.reads.Load() > n && c.loading == nil && c.loadErr == nil && c.now().Sub(c.readAt) < ttl
		})
	}
	cached := func() []string {
		c.mu.Lock()
		defer c.mu.Unlock()
		var ids []string
		for _, tg := range c.targets {
			ids = append(ids, tg.id)
		}
		return ids
	}

	t.Cleanup(func() {
		if t.Failed() { // what the failed wait saw, for the next reader
			c.mu.Lock()
			loadErr := c.loadErr
			c.mu.Unlock()
			t.Logf("q1 health %+v; q2 health %+v; cached %v after %d reads (last error %v); flushed %v, routed before it and in flight %d, late %d; served q1 %d q2 %d",
				q1.Health(), q2.Health(), cached(), src.reads.Load(), loadErr, fw.flushed.Load(), fw.inFlightBefore(), fw.late.Load(), q1.served.Load(), q2.served.Load())
		}
	})

	client := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	load := testutil.StartLoad(3, func(ctx context.Context) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, gw.URL+"/api/quote?symbol=ABC", nil)
		if err != nil {
			return "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return "", err
		}
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%d: %s", resp.StatusCode, body)
		}
		var got struct{ Instance string }
		if err := json.Unmarshal(body, &got); err != nil {
			return "", err
		}
		return got.Instance, nil
	})
	defer load.Stop()
	reread("the first read with both") // they registered after the gateway's first read, if any
	testutil.WaitFor(t, "q1 and q2 serving", func() bool { return q1.served.Load() > 20 && q2.served.Load() > 20 })

	reads := src.reads.Load()
	fw.armed.Store(true)
	cli.Run(t, "drain", "quote", "q1", "-zk", zkc.ConnectString())
	testutil.WaitFor(t, "q1 out of rotation by the operator, its gateways flushed", func() bool {
		h := q1.Health()
		return len(h) == 1 && !h[0].Healthy && h[0].By == provider.ByOperator && !h[0].Done.IsZero()
	})
	if h := q1.Health()[0]; h.Err != nil || !fw.flushed.Load() {
		t.Fatalf("drain transition %+v, gateway answered the flush: %v; want it flushed", h, fw.flushed.Load())
	}
	if ids := cached(); slices.Contains(ids, "q1") || src.reads.Load() != reads {
		t.Fatalf("after the flush the cache lists %v after %d reads of ZooKeeper, want q1 evicted by the flush alone", ids, src.reads.Load()-reads)
	}
	testutil.WaitFor(t, "the requests routed before the flush answered", func() bool { return fw.inFlightBefore() == 0 })
	held := q1.served.Load()
	if inst := node(t, conn, path); inst.Status() != sd.StatusOutOfService || inst.Metadata[sd.MetadataDrainedBy] != sd.DrainedByOperator {
		t.Fatalf("node while drained: %+v", inst.Metadata)
	}
	reread("a read of the drained node")
	if ids := cached(); !slices.Equal(ids, []string{"q2"}) {
		t.Fatalf("read while drained: %v, want q2 only", ids)
	}

	// An expiry of q1's session: its node is re-created, still drained,
	// and read so.
	_, stat, err := conn.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	id := rec.LastSession()
	expired := false
	for _, a := range zkc.Addrs() {
		if rec.Expire(a, id) == nil {
			expired = true
		}
	}
	if !expired {
		t.Fatal("no server expired q1's session")
	}
	testutil.WaitFor(t, "q1's node re-created in a new session", func() bool {
		_, st, err := conn.Get(path)
		return err == nil && st.Czxid != stat.Czxid
	})
	if inst := node(t, conn, path); inst.Status() != sd.StatusOutOfService || inst.Metadata[sd.MetadataDrainedBy] != sd.DrainedByOperator {
		t.Fatalf("node re-created after the expiry: %+v, want still drained", inst.Metadata)
	}
	reread("a read of the re-created node")
	if ids := cached(); !slices.Equal(ids, []string{"q2"}) {
		t.Fatalf("read after the expiry: %v, want q2 only", ids)
	}
	n2 := q2.served.Load()
	testutil.WaitFor(t, "100 requests after that read", func() bool { return q2.served.Load() > n2+100 })
	if n := q1.served.Load() - held; n != 0 {
		t.Fatalf("q1 served %d requests while drained, after those routed before the flush answered", n)
	}
	if n := fw.late.Load(); n != 0 {
		t.Fatalf("the gateway sent q1 %d requests it routed after it answered the drain's flush", n)
	}

	cli.Run(t, "undrain", "quote", "q1", "-zk", zkc.ConnectString())
	testutil.WaitFor(t, "q1 UP again", func() bool {
		inst := node(t, conn, path)
		return inst.Status() == sd.StatusUp && inst.Metadata[sd.MetadataDrainedBy] == ""
	})
	testutil.WaitFor(t, "q1 back by the operator", func() bool {
		h := q1.Health()
		return len(h) == 2 && h[1].Healthy && h[1].By == provider.ByOperator
	})
	reread("a read after the undrain")
	testutil.WaitFor(t, "q1 gets traffic again", func() bool { return q1.served.Load() > held+20 })
	load.Stop()
	if n := load.Failed(); n != 0 {
		t.Fatalf("%d requests failed; first: %v", n, load.FirstErr())
	}
}

// node reads the instance at p; the zero Instance when there is none.
func node(t *testing.T, conn testutil.ZK, p string) sd.Instance {
	t.Helper()
	data, _, err := conn.Get(p)
	if err != nil {
		return sd.Instance{}
	}
	inst, err := sd.CuratorCodec{}.Decode("quote", pathpkg.Base(p), data)
	if err != nil {
		t.Fatal(err)
	}
	return inst
}
