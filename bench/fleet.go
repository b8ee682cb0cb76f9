package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	kitsd "github.com/go-kit/kit/sd"
	kitzk "github.com/go-kit/kit/sd/zk"
	"github.com/go-kit/log"
	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// The fleet suite (`go run . -only fleet`): fleetC consumers, each a
// gateway routing fleetS services of fleetN instances, on a 3-member
// ensemble with stock limits; gracekit (one consumer.Consumer per
// consumer, as users build it: one watch session, a recursive watch per
// service) and go-kit (sd/zk, one Instancer per service) side by side,
// each consumer with its own sessions as separate processes would have.
// The sessions the consumers hold are counted on the members (cons). Every
// consumer connects through a counting proxy, so that the bytes read from
// ZooKeeper are measured the same way for both. Figures: the watches the
// ensemble holds (mntr's zk_watch_count summed over the members, as
// fleet_zk_watch_entries, and less the second table entry that 3.6–3.8
// give each persistent watch, as fleet_zk_watches; see persistentEntries), the
// bytes the consumers read for the first load and for one rolling restart
// of every instance, the propagation of a deregistration to all consumers
// (p50, p99), and the consumers' CPU time over the restart.
func init() { register("fleet", runFleet) }

const (
	fleetC      = 20
	fleetS      = 50
	fleetN      = 20
	fleetTrials = 100 // deregistrations timed per side
)

// fleetSide is one implementation under test: it starts a consumer over
// addrs and returns, per service, its latest instance count.
type fleetSide struct {
	name  string
	start func(addrs []string) (*fleetConsumer, error)
}

// fleetConsumer is one gateway: counts[s] is the size of the latest set it
// published for service s.
type fleetConsumer struct {
	counts     [fleetS]atomic.Int32
	stop       func()
	persistent func() int // persistent watches it holds
}

func fleetService(s int) string { return fmt.Sprintf("fleet-%02d", s) }

func (fc *fleetConsumer) follow(s int, ch chan kitsd.Event, done <-chan struct{}, wg *sync.WaitGroup) {
	wg.Go(func() {
		for {
			select {
			case ev := <-ch:
				if ev.Err == nil {
					fc.counts[s].Store(int32(len(ev.Instances)))
				}
			case <-done:
				return
			}
		}
	})
}

func ourFleetConsumer(addrs []string) (*fleetConsumer, error) {
	sess, err := sd.NewSession(strings.Join(addrs, ","), sd.SessionTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	c, err := consumer.New(sess)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	fc := &fleetConsumer{}
	var recursive int
	done := make(chan struct{})
	var wg sync.WaitGroup
	for s := range fleetS {
		in, err := c.Instancer(ctx, fleetService(s))
		if err != nil {
			close(done)
			wg.Wait()
			_ = c.Stop(context.Background())
			return nil, err
		}
		if in.Stats().WatchMode == sd.WatchRecursive {
			recursive++ // one per service, on the one watch session
		}
		ch := make(chan kitsd.Event, 16)
		in.Register(ch)
		fc.follow(s, ch, done, &wg)
	}
	fc.persistent = func() int { return recursive }
	fc.stop = func() { close(done); wg.Wait(); _ = c.Stop(context.Background()) }
	return fc, nil
}

func gokitFleetConsumer(addrs []string) (*fleetConsumer, error) {
	cl, err := kitzk.NewClient(addrs, log.NewNopLogger(), kitzk.SessionTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	fc := &fleetConsumer{}
	done := make(chan struct{})
	var (
		wg  sync.WaitGroup
		ins []*kitzk.Instancer
	)
	stop := func() {
		close(done)
		wg.Wait()
		for _, in := range ins {
			in.Stop()
		}
		cl.Stop()
	}
	for s := range fleetS {
		in, err := kitzk.NewInstancer(cl, "/services/"+fleetService(s), log.NewNopLogger())
		if err != nil {
			stop()
			return nil, err
		}
		ins = append(ins, in)
		ch := make(chan kitsd.Event, 16)
		in.Register(ch)
		fc.follow(s, ch, done, &wg)
	}
	fc.stop = stop
	return fc, nil
}

// countingProxy forwards connections to one server and counts the bytes
// sent from the server to the clients.
type countingProxy struct {
	ln    net.Listener
	read  atomic.Int64
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newCountingProxy(target string) (*countingProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(s, c); _ = s.Close() })
			p.wg.Go(func() { n, _ := io.Copy(countWriter{c, &p.read}, s); _ = n; _ = c.Close() })
		}
	})
	return p, nil
}

type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (cw countWriter) Write(b []byte) (int, error) {
	n, err := cw.w.Write(b)
	cw.n.Add(int64(n))
	return n, err
}

func (p *countingProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type fleetFigures struct {
	sessions           int // the consumers hold (cons)
	entries            int // of the members' watch tables (mntr)
	persistent         int // persistent watches the consumers hold
	loadBytes          int64
	restartBytes       int64
	p50, p99           float64 // ms
	cpu                time.Duration
	loadTime, restTime time.Duration
}

func runFleet() error {
	dir, err := os.MkdirTemp("", "gracekit-fleet-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cluster, err := zktest.Start(dir, append(serverOptions, zktest.Size(3), zktest.JVMArgs("-Xmx1g"))...)
	if err != nil {
		return err
	}
	defer cluster.Close()
	writer, _, err := zk.Connect(cluster.Addrs(), 30*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		return err
	}
	defer writer.Close()
	for s := range fleetS {
		if err := populate(writer, fleetService(s), fleetN); err != nil {
			return err
		}
	}
	weight, err := persistentEntries(cluster.Addrs()[0])
	if err != nil {
		return err
	}
	results := map[string]fleetFigures{}
	for _, side := range []fleetSide{{"gracekit", ourFleetConsumer}, {"gokit", gokitFleetConsumer}} {
		f, err := measureFleet(cluster, writer, side)
		if err != nil {
			return fmt.Errorf("fleet, %s: %w", side.name, err)
		}
		results[side.name] = f
		fmt.Fprintf(os.Stderr, "fleet %s: loaded in %v, restarted in %v\n", side.name, f.loadTime.Round(time.Millisecond), f.restTime.Round(time.Millisecond))
	}
	ours, kit := results["gracekit"], results["gokit"]
	tag := fmt.Sprintf("c%d_s%d_n%d", fleetC, fleetS, fleetN)
	reportCount("fleet_zk_sessions_"+tag, ours.sessions, kit.sessions, "")
	reportCount("fleet_zk_watches_"+tag, clientWatches(ours.entries, ours.persistent, weight), clientWatches(kit.entries, kit.persistent, weight), "")
	reportCount("fleet_zk_watch_entries_"+tag, ours.entries, kit.entries, "")
	report("fleet_bytes_read_load_"+tag, float64(ours.loadBytes)/1e6, float64(kit.loadBytes)/1e6, "MB")
	report("fleet_bytes_read_restart_"+tag, float64(ours.restartBytes)/1e6, float64(kit.restartBytes)/1e6, "MB")
	report("fleet_propagation_deregister_p50_"+tag, ours.p50, kit.p50, "ms")
	report("fleet_propagation_deregister_p99_"+tag, ours.p99, kit.p99, "ms")
	report("fleet_consumer_cpu_restart_"+tag, ours.cpu.Seconds(), kit.cpu.Seconds(), "s")
	return nil
}

// measureFleet starts fleetC consumers of one side through counting
// proxies, waits for the complete sets, and measures.
func measureFleet(cluster *zktest.Cluster, writer *zk.Conn, side fleetSide) (fleetFigures, error) {
	var f fleetFigures
	var proxies []*countingProxy
	var addrs []string
	for _, a := range cluster.Addrs() {
		p, err := newCountingProxy(a)
		if err != nil {
			return f, err
		}
		defer p.close()
		proxies = append(proxies, p)
		addrs = append(addrs, p.ln.Addr().String())
	}
	read := func() int64 {
		var n int64
		for _, p := range proxies {
			n += p.read.Load()
		}
		return n
	}
	baseSessions := 0 // the writer's
	for _, a := range cluster.Addrs() {
		_, n, err := consCounts(a)
		if err != nil {
			return f, err
		}
		baseSessions += n
	}
	begin := time.Now()
	var consumers []*fleetConsumer
	defer func() {
		for _, c := range consumers {
			c.stop()
		}
	}()
	for range fleetC {
		// Each consumer's connect string starts at another member, as
		// separate processes would spread.
		slices.Reverse(addrs)
		fc, err := side.start(slices.Clone(addrs))
		if err != nil {
			return f, err
		}
		consumers = append(consumers, fc)
	}
	all := func(s int, want int32) bool {
		for _, c := range consumers {
			if c.counts[s].Load() != want {
				return false
			}
		}
		return true
	}
	if err := waitAll(2*time.Minute, func() bool {
		for s := range fleetS {
			if !all(s, fleetN) {
				return false
			}
		}
		return true
	}); err != nil {
		return f, fmt.Errorf("first load: %w", err)
	}
	time.Sleep(time.Second) // let per-node watches be armed
	f.loadTime = time.Since(begin)
	f.loadBytes = read()
	for _, a := range cluster.Addrs() {
		w, _, err := serverWatches(a)
		if err != nil {
			return f, err
		}
		f.entries += w
		_, n, err := consCounts(a)
		if err != nil {
			return f, err
		}
		f.sessions += n
	}
	f.sessions -= baseSessions
	for _, c := range consumers {
		if c.persistent != nil {
			f.persistent += c.persistent()
		}
	}

	// Propagation: one deregistration at a time, until every consumer
	// lists one instance less; then the node comes back.
	var lat []float64
	for trial := range fleetTrials {
		s, i := trial%fleetS, trial%fleetN
		id, data, err := node(fleetService(s), i)
		if err != nil {
			return f, err
		}
		p := "/services/" + fleetService(s) + "/" + id
		t0 := time.Now()
		if err := writer.Delete(p, -1); err != nil {
			return f, err
		}
		if err := waitAll(30*time.Second, func() bool { return all(s, fleetN-1) }); err != nil {
			return f, fmt.Errorf("propagation: %w", err)
		}
		lat = append(lat, ms(time.Since(t0)))
		if _, err := writer.Create(p, data, 0, zk.WorldACL(zk.PermAll)); err != nil {
			return f, err
		}
		if err := waitAll(30*time.Second, func() bool { return all(s, fleetN) }); err != nil {
			return f, fmt.Errorf("propagation, back: %w", err)
		}
	}
	f.p50, f.p99 = pct(lat, 50), pct(lat, 99)

	// One rolling restart of every instance: each node deleted and created
	// again, service after service, a service's instances in parallel.
	bytes0, cpu0, t0 := read(), cpuTime(), time.Now()
	for s := range fleetS {
		var wg sync.WaitGroup
		errs := make(chan error, fleetN)
		for i := range fleetN {
			wg.Go(func() {
				id, data, err := node(fleetService(s), i)
				if err == nil {
					p := "/services/" + fleetService(s) + "/" + id
					if err = writer.Delete(p, -1); err == nil {
						_, err = writer.Create(p, data, 0, zk.WorldACL(zk.PermAll))
					}
				}
				if err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return f, err
		}
	}
	if err := waitAll(2*time.Minute, func() bool {
		for s := range fleetS {
			if !all(s, fleetN) {
				return false
			}
		}
		return true
	}); err != nil {
		return f, fmt.Errorf("after the rolling restart: %w", err)
	}
	time.Sleep(time.Second) // the last reads and watch re-arms
	f.restTime = time.Since(t0)
	f.restartBytes = read() - bytes0
	f.cpu = cpuTime() - cpu0
	return f, nil
}

func waitAll(limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("not within " + limit.String())
		}
		time.Sleep(200 * time.Microsecond)
	}
	return nil
}
