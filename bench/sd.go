package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	kitsd "github.com/go-kit/kit/sd"
	kitzk "github.com/go-kit/kit/sd/zk"
	"github.com/go-kit/log"
	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// The sd suite: discovery of N Curator nodes by gracekit's Instancer and by
// go-kit's sd/zk Instancer, and the floor (floor.go) of the same loads,
// against one ZooKeeper server, in one run. With -svg it draws the load
// times against N.
func init() { register("sd", runSD) }

// sdLoadsOnly skips the deletion and creation figures, which take most of
// the suite's time, to measure the loads alone.
var sdLoadsOnly = flag.Bool("sd-loads-only", false, "sd suite: only the load lines (sd_load_*, sd_load_floor_*)")

// perNode measures gracekit's Instancer in its fallback mode, a watch per
// node, in the sd and scale suites.
var perNode = flag.Bool("per-node", false, "sd and scale suites: gracekit's Instancer with a watch per node (sd.WatchPerNode)")

// ourOptions are the options of gracekit's Instancer under test.
func ourOptions() []sd.InstancerOption {
	if *perNode {
		return []sd.InstancerOption{sd.WithWatchMode(sd.WatchPerNode)}
	}
	return nil
}

// loadRuns is how many timed loads of each N the sd suite takes of
// gracekit and of the floor: 25, whose medians moved by a tenth between
// runs at 15. go-kit, which takes seconds a load at 5,000 and 10,000, is
// timed in the first gokitRuns[n] rounds only.
const loadRuns = 25

var gokitRuns = map[int]int{100: 25, 1000: 25, 5000: 7, 10000: 3}

// eventTrials is how many deletions (and creations) the sd suite times a
// side: eventRounds rounds of 100, each round's percentile one sample of
// the figure's spread (a p99 of fewer than 100 is a maximum).
const (
	eventRounds = 3
	eventTrials = 100 * eventRounds
)

func runSD() error {
	cluster, writer, done, err := benchServer()
	if err != nil {
		return err
	}
	defer done()

	// Each N: the median of loadRuns (gokitRuns[n] for go-kit) after warm-up rounds (not
	// counted) that warm the server's JIT and both clients up; the loads
	// are a few milliseconds on a shared machine, so one run tells little.
	var points []loadPoint
	for _, n := range []int{100, 1000, 5000, 10000} {
		service := fmt.Sprintf("load%d", n)
		if err := populate(writer, service, n); err != nil {
			return err
		}
		warm := 2
		if n >= 5000 {
			warm = 1
		}
		pt, err := measureLoad(cluster, service, n, loadRuns, gokitRuns[n], warm)
		if err != nil {
			return err
		}
		points = append(points, pt)
		reportRounds(fmt.Sprintf("sd_load_n%d", n), pt.runs.gracekit, pt.runs.gokit, "ms")
		reportFloorRounds(fmt.Sprintf("sd_load_floor_n%d", n), pt.runs.gracekit, pt.runs.floor, "ms")
	}
	if *svgPath != "" {
		if err := writeLoadChart(*svgPath, points); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench: wrote %s\n", *svgPath)
	}
	if *sdLoadsOnly {
		return nil
	}
	for _, n := range []int{100, 1000} {
		service := fmt.Sprintf("load%d", n)
		ours, err := measureEvents(cluster, writer, service, n, newOurs)
		if err != nil {
			return err
		}
		theirs, err := measureEvents(cluster, writer, service, n, newGokit)
		if err != nil {
			return err
		}
		for _, q := range []float64{50, 99} {
			reportRounds(fmt.Sprintf("sd_delete_n%d_p%.0f", n, q), roundPct(ours.del, q), roundPct(theirs.del, q), "ms")
		}
		if n == 1000 {
			for _, q := range []float64{50, 99} {
				reportRounds(fmt.Sprintf("sd_create_n%d_p%.0f", n, q), roundPct(ours.add, q), roundPct(theirs.add, q), "ms")
			}
		}
	}
	return nil
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// node is a ~150-byte Curator node, as a Spring service writes it.
func node(service string, i int) (string, []byte, error) {
	id := fmt.Sprintf("%08d-0000-4000-8000-000000000000", i)
	data, err := sd.CuratorCodec{}.Encode(sd.Instance{
		Name: service, ID: id, Address: "10.1." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250), Port: 8080,
		Metadata: map[string]string{sd.MetadataStatus: "UP"},
	})
	return id, data, err
}

func populate(c *zk.Conn, service string, n int) error {
	for _, p := range []string{"/services", "/services/" + service} {
		if _, err := c.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 64)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			id, data, err := node(service, i)
			if err == nil {
				_, err = c.Create("/services/"+service+"/"+id, data, 0, zk.WorldACL(zk.PermAll))
			}
			if err != nil && !errors.Is(err, zk.ErrNodeExists) {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// watcher is one side under test: an Instancer with a subscribed channel.
type watcher struct {
	ch   chan kitsd.Event
	stop func()
}

type newWatcher func(c *zktest.Cluster, service string) (*watcher, error)

func newOurs(c *zktest.Cluster, service string) (*watcher, error) {
	cl, err := sd.NewClient(c.ConnectString(), sd.SessionTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	in, err := sd.NewInstancer(cl, service, ourOptions()...)
	if err != nil {
		cl.Close()
		return nil, err
	}
	w := &watcher{ch: make(chan kitsd.Event, 1024)}
	in.Register(w.ch)
	w.stop = func() { in.Deregister(w.ch); in.Stop(); cl.Close() }
	return w, nil
}

func newGokit(c *zktest.Cluster, service string) (*watcher, error) {
	cl, err := kitzk.NewClient(c.Addrs(), log.NewNopLogger(), kitzk.SessionTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	in, err := kitzk.NewInstancer(cl, "/services/"+service, log.NewNopLogger())
	if err != nil {
		cl.Stop()
		return nil, err
	}
	w := &watcher{ch: make(chan kitsd.Event, 1024)}
	in.Register(w.ch)
	w.stop = func() { in.Deregister(w.ch); in.Stop(); cl.Stop() }
	return w, nil
}

// await reads events until one lists exactly n instances.
func (w *watcher) await(n int) error {
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case ev := <-w.ch:
			if ev.Err == nil && len(ev.Instances) == n {
				return nil
			}
		case <-deadline.C:
			return fmt.Errorf("no event with %d instances within 60s", n)
		}
	}
}

// loadPoint is the median load time of each side at one N, and every
// round's.
type loadPoint struct {
	n                      int
	gracekit, gokit, floor float64 // ms
	runs                   struct{ gracekit, gokit, floor []float64 }
}

// measureLoad times construction until the first complete event, median
// of runs, for gracekit, go-kit (in the first gokitRuns rounds) and the
// floor in turn, after warm rounds that are not counted.
func measureLoad(c *zktest.Cluster, service string, n, runs, gokitRuns, warm int) (loadPoint, error) {
	pt := loadPoint{n: n}
	var a, b, f []float64
	first := -warm
	for run := first; run < runs; run++ {
		sides := []struct {
			mk  newWatcher
			out *[]float64
		}{{newOurs, &a}, {newGokit, &b}}
		if run >= gokitRuns {
			sides = sides[:1]
		}
		for _, side := range sides {
			quiesce()
			start := time.Now()
			w, err := side.mk(c, service)
			if err != nil {
				return pt, err
			}
			err = w.await(n)
			elapsed := time.Since(start)
			w.stop()
			if err != nil {
				return pt, err
			}
			if run >= 0 {
				*side.out = append(*side.out, ms(elapsed))
			}
		}
		quiesce()
		start := time.Now()
		got, err := zktest.BareLoad(c.Addrs()[0], "/services/"+service)
		elapsed := time.Since(start)
		if err != nil {
			return pt, fmt.Errorf("floor: %w", err)
		}
		if got != n {
			return pt, fmt.Errorf("floor: read %d nodes, want %d", got, n)
		}
		if run >= 0 {
			f = append(f, ms(elapsed))
		}
	}
	pt.gracekit, pt.gokit, pt.floor = median(a), median(b), median(f)
	pt.runs.gracekit, pt.runs.gokit, pt.runs.floor = a, b, f
	return pt, nil
}

// quiesce starts a timed load from rest, whichever side it is: the last
// run's garbage collected (not charged to the next run's allocations) and
// the server done with the last run's closeSession (a logged transaction,
// which would queue the next run's createSession behind its fsync).
func quiesce() {
	runtime.GC()
	time.Sleep(20 * time.Millisecond)
}

type eventTimes struct{ del, add []float64 }

// measureEvents deletes one node and creates it again, eventTrials times,
// timing each from the writer's call until the watcher's event.
func measureEvents(c *zktest.Cluster, writer *zk.Conn, service string, n int, mk newWatcher) (eventTimes, error) {
	var out eventTimes
	w, err := mk(c, service)
	if err != nil {
		return out, err
	}
	defer w.stop()
	if err := w.await(n); err != nil {
		return out, err
	}
	ctx := context.Background()
	for i := range eventTrials {
		if ctx.Err() != nil {
			break
		}
		id, data, err := node(service, i%n)
		if err != nil {
			return out, err
		}
		p := "/services/" + service + "/" + id
		start := time.Now()
		if err := writer.Delete(p, -1); err != nil {
			return out, err
		}
		if err := w.await(n - 1); err != nil {
			return out, err
		}
		out.del = append(out.del, ms(time.Since(start)))
		start = time.Now()
		if _, err := writer.Create(p, data, 0, zk.WorldACL(zk.PermAll)); err != nil {
			return out, err
		}
		if err := w.await(n); err != nil {
			return out, err
		}
		out.add = append(out.add, ms(time.Since(start)))
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// roundPct splits trials into eventRounds rounds in the order they were
// taken and returns each round's q-th percentile.
func roundPct(trials []float64, q float64) []float64 {
	return chunkPct(trials, eventRounds, q)
}

// chunkPct is the q-th percentile of each of n consecutive, equal chunks
// of trials (the remainder goes to the last).
func chunkPct(trials []float64, n int, q float64) []float64 {
	size := len(trials) / n
	if size == 0 {
		return []float64{pct(trials, q)}
	}
	out := make([]float64, n)
	for i := range n {
		end := (i + 1) * size
		if i == n-1 {
			end = len(trials)
		}
		out[i] = pct(trials[i*size:end], q)
	}
	return out
}

// pct is the q-th percentile by nearest rank.
func pct(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(q/100*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}
