package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"time"

	kitsd "github.com/go-kit/kit/sd"
	kitzk "github.com/go-kit/kit/sd/zk"
	"github.com/go-kit/log"

	"github.com/gracekit/gracekit/internal/zkwire"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// The scale suite: what one Instancer costs while it watches a service of
// scaleN instances, gracekit's and go-kit's sd/zk each measured alone on a
// server no other client watches: goroutines and heap in this process, and
// watches on the server.
func init() { register("scale", runScale) }

const scaleN = 5000

// footprint is what one Instancer holds once its load settled. Each is a
// delta against the moment its client had connected, so the client's own
// fixed cost is left out (shown apart as clientGoroutines).
type footprint struct {
	goroutines       int
	clientGoroutines int     // the client's, before the Instancer started
	entries          int     // of the server's watch tables, for the one client (mntr)
	dataWatches      int     // of which data watches (wchs)
	persistent       int     // persistent watches the client holds
	heapPerInstance  float64 // bytes
}

// scaleSide builds one side: connect returns the client, then start
// builds the Instancer on it and returns when its load settled.
type scaleSide struct {
	name    string
	connect func(c *zktest.Cluster) (start func(service string) (stop func(), persistent int, err error), closeClient func(), err error)
}

func runScale() error {
	cluster, writer, done, err := benchServer()
	if err != nil {
		return err
	}
	defer done()
	const service = "scale"
	if err := populate(writer, service, scaleN); err != nil {
		return err
	}

	weight, err := persistentEntries(cluster.Addrs()[0])
	if err != nil {
		return err
	}
	var got []footprint
	for _, side := range []scaleSide{{"gracekit", connectOurs}, {"gokit", connectGokit}} {
		fp, err := measureFootprint(cluster, service, side)
		if err != nil {
			return fmt.Errorf("%s: %w", side.name, err)
		}
		got = append(got, fp)
	}
	ours, theirs := got[0], got[1]
	name := func(what string) string { return fmt.Sprintf("sd_%s_n%d", what, scaleN) }
	reportCount(name("goroutines"), ours.goroutines, theirs.goroutines, "")
	reportCount(name("client_goroutines"), ours.clientGoroutines, theirs.clientGoroutines, "")
	reportCount(name("zk_watches"), clientWatches(ours.entries, ours.persistent, weight), clientWatches(theirs.entries, theirs.persistent, weight), "")
	reportCount(name("zk_watch_entries"), ours.entries, theirs.entries, "")
	reportCount(name("zk_data_watches"), ours.dataWatches, theirs.dataWatches, "")
	report(name("heap_per_instance"), ours.heapPerInstance, theirs.heapPerInstance, "B")
	return nil
}

// reportCount is report for counts, printed as integers: one round, a
// count does not vary between rounds.
func reportCount(name string, gracekit, gokit int, unit string) {
	fmt.Printf("BENCH name=%s gracekit=%d%s gokit=%d%s %s\n", name, gracekit, unit, gokit, unit, spread([]float64{float64(gracekit)}, []float64{float64(gokit)}))
}

func measureFootprint(c *zktest.Cluster, service string, side scaleSide) (footprint, error) {
	var fp footprint
	addr := c.Addrs()[0]
	// The previous side's session may still be closing.
	for deadline := time.Now().Add(10 * time.Second); ; {
		w, _, err := serverWatches(addr)
		if err != nil {
			return fp, err
		}
		if w == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fp, fmt.Errorf("server holds %d watches before the run, want 0", w)
		}
		time.Sleep(50 * time.Millisecond)
	}
	g0, _ := settledRuntime()
	start, closeClient, err := side.connect(c)
	if err != nil {
		return fp, err
	}
	defer closeClient()
	g1, h1 := settledRuntime()
	w1, dw1, err := serverWatches(addr) // the client's own (see connectOurs)
	if err != nil {
		return fp, err
	}
	stop, persistent, err := start(service)
	if err != nil {
		return fp, err
	}
	defer stop()
	fp.persistent = persistent
	// The watches are armed once the Instancer says so; wait until the
	// server's count stands still as well.
	prev := -1
	for deadline := time.Now().Add(60 * time.Second); ; {
		w, dw, err := serverWatches(addr)
		if err != nil {
			return fp, err
		}
		if w == prev {
			fp.entries, fp.dataWatches = w-w1, dw-dw1
			break
		}
		if time.Now().After(deadline) {
			return fp, fmt.Errorf("watch count still moving after 60s (%d)", w)
		}
		prev = w
		time.Sleep(250 * time.Millisecond)
	}
	g2, h2 := settledRuntime()
	fp.clientGoroutines = g1 - g0
	fp.goroutines = g2 - g1
	fp.heapPerInstance = float64(int64(h2)-int64(h1)) / scaleN
	return fp, nil
}

// settledRuntime lets goroutines that are ending end, collects garbage and
// returns the number of goroutines and the live heap.
func settledRuntime() (int, uint64) {
	time.Sleep(200 * time.Millisecond)
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return runtime.NumGoroutine(), m.HeapAlloc
}

// drain empties ch without blocking, so no published set is held there.
func drain(ch chan kitsd.Event) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func connectOurs(c *zktest.Cluster) (func(string) (func(), int, error), func(), error) {
	cl, err := sd.NewClient(c.ConnectString(), sd.SessionTimeout(30*time.Second))
	if err != nil {
		return nil, nil, err
	}
	// The session that carries the watches (the watch session, or the
	// client's own for per-node watches) is the client's fixed cost, which
	// the footprint leaves out, as it does go-kit's session: an Instancer
	// of an empty service opens it and holds it open.
	base, err := sd.NewInstancerContext(context.Background(), cl, "scale-baseline", ourOptions()...)
	if err != nil {
		cl.Close()
		return nil, nil, fmt.Errorf("the client's watching session: %w", err)
	}
	start := func(service string) (func(), int, error) {
		in, err := sd.NewInstancer(cl, service, ourOptions()...)
		if err != nil {
			return nil, 0, err
		}
		ch := make(chan kitsd.Event, 16)
		in.Register(ch)
		w := &watcher{ch: ch}
		if err := w.await(scaleN); err != nil {
			in.Stop()
			return nil, 0, err
		}
		// Settled: every node read with its watch armed, no error.
		for deadline := time.Now().Add(60 * time.Second); in.Err() != nil; {
			if time.Now().After(deadline) {
				in.Stop()
				return nil, 0, fmt.Errorf("instancer not settled after 60s: %v", in.Err())
			}
			time.Sleep(10 * time.Millisecond)
		}
		drain(ch)
		persistent := 0
		if in.Stats().WatchMode == sd.WatchRecursive {
			persistent = 1
		}
		return func() { in.Deregister(ch); in.Stop() }, persistent, nil
	}
	return start, func() { base.Stop(); cl.Close() }, nil
}

func connectGokit(c *zktest.Cluster) (func(string) (func(), int, error), func(), error) {
	cl, err := kitzk.NewClient(c.Addrs(), log.NewNopLogger(), kitzk.SessionTimeout(30*time.Second))
	if err != nil {
		return nil, nil, err
	}
	start := func(service string) (func(), int, error) {
		in, err := kitzk.NewInstancer(cl, "/services/"+service, log.NewNopLogger())
		if err != nil {
			return nil, 0, err
		}
		ch := make(chan kitsd.Event, 16)
		in.Register(ch)
		w := &watcher{ch: ch}
		if err := w.await(scaleN); err != nil {
			in.Stop()
			return nil, 0, err
		}
		drain(ch)
		return func() { in.Deregister(ch); in.Stop() }, 0, nil
	}
	return start, cl.Stop, nil
}

// clientWatches is how many watches clients hold on a server: the entries
// of its watch tables less the extra entries of each persistent watch, on
// a server that files one in weight tables (persistentEntries).
func clientWatches(entries, persistent, weight int) int { return entries - persistent*(weight-1) }

// persistentEntries is how many entries of mntr's zk_watch_count one
// persistent watch makes on the server at addr. ZooKeeper 3.6 to 3.8 file
// an addWatch in the data and the child watch table alike (DataTree.addWatch
// in the 3.8.0 jar calls both tables' addWatch, and getWatchCount sums
// their sizes), so mntr counts each twice. A probe session adds one on a
// scratch path, on a server no one else watches, and reads the count.
func persistentEntries(addr string) (int, error) {
	before, _, err := serverWatches(addr)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := zkwire.Dial(ctx, zkwire.Config{Addr: addr, SessionTimeout: 10 * time.Second})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if _, err := conn.Do(ctx, zkwire.OpAddWatch, zkwire.AddWatchBody("/gracekit-bench-probe", zkwire.ModePersistentRecursive)); err != nil {
		return 0, fmt.Errorf("probe addWatch: %w", err)
	}
	after, _, err := serverWatches(addr)
	if err != nil {
		return 0, err
	}
	w := after - before
	if w < 1 || w > 2 {
		return 0, fmt.Errorf("one persistent watch made %d entries of zk_watch_count", w)
	}
	return w, nil
}

// serverWatches returns the watches the server holds: mntr's
// zk_watch_count, data and child watches together. wchs and wchc list data
// (and exists) watches only, not child watches, in ZooKeeper 3.8; their
// figure is dataWatches. zktest enables every four-letter word.
func serverWatches(addr string) (total, dataWatches int, err error) {
	mntr, err := fourLetter(addr, "mntr")
	if err != nil {
		return 0, 0, err
	}
	wchs, err := fourLetter(addr, "wchs")
	if err != nil {
		return 0, 0, err
	}
	if total, err = field(mntr, "zk_watch_count\t"); err != nil {
		return 0, 0, err
	}
	if dataWatches, err = field(wchs, "Total watches:"); err != nil {
		return 0, 0, err
	}
	return total, dataWatches, nil
}

// field reads the integer after prefix at the start of a line of out.
func field(out, prefix string) (int, error) {
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no %q in %q", prefix, out)
}

// fourLetter sends a four-letter word and returns the whole answer.
func fourLetter(addr, cmd string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte(cmd)); err != nil {
		return "", err
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		return "", fmt.Errorf("%s: %w", cmd, err)
	}
	return string(b), nil
}
