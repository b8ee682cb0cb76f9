package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitsd "github.com/go-kit/kit/sd"
	kitzk "github.com/go-kit/kit/sd/zk"
	"github.com/go-kit/log"
	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/internal/proptrace"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// The propagation suite: from a provider's deregistration (its node
// deleted) until the last of propGateways gateways no longer routes to it,
// for gracekit (sd.Instancer + endpoint.Endpointer) and go-kit (sd/zk
// Instancer + sd.NewEndpointer), each gateway with its own session as
// separate processes would have. Each side watches a service of its own,
// so a trial wakes only that side's gateways; trials alternate sides, and
// the floor's (propFloor) with them, each round starting with another.
//
// Every side is observed by a notification, as the floor's raw watchers
// are woken by theirs: a gateway's factory gives each endpoint an
// io.Closer, which both Endpointers call when the instance leaves their set
// (gracekit's right after it stored the smaller set, go-kit's under the
// lock its Endpoints waits for), and the trial ends when the last gateway's
// Endpoints, called on that wake, lists one endpoint fewer. Polling
// Endpoints with a sleep instead measured the sleep: an idle Go runtime
// wakes a 100 µs sleep after 1.1 ms (its netpoller waits in whole
// milliseconds), which the floor's channel never waited for.
func init() { register("propagation", runPropagation) }

// propStages prints, with the figures, when the last gracekit gateway
// reached each stage of internal/proptrace (p50 and p99 from the delete).
var propStages = flag.Bool("prop-stages", false, "propagation suite: print p50/p99 per stage of gracekit's deregistration, from the delete")

const (
	propGateways  = 2
	propInstances = 10
	propTrials    = 500 // per side
	propRounds    = 5   // of 100 trials: the lines' spread
	propPoll      = 100 * time.Microsecond
	// propSettle is the pause before every delete, of each side alike:
	// the machine is as idle as a gateway's between two changes, not
	// still busy with what the previous trial, of whichever side, did.
	propSettle = 2 * time.Millisecond
)

// gateway is one consumer: an Endpointer over an Instancer over a client.
type gateway struct {
	eps   kitsd.Endpointer
	gone  chan struct{} // an endpoint was closed: it left the set
	close func()
}

type newGateway func(c *zktest.Cluster, service string, gone chan struct{}) (*gateway, error)

// propFactory builds endpoints whose io.Closer signals gone.
func propFactory(gone chan struct{}) kitsd.Factory {
	return func(instance string) (kitendpoint.Endpoint, io.Closer, error) {
		return func(context.Context, any) (any, error) { return instance, nil }, closeSignal(gone), nil
	}
}

// closeSignal is an io.Closer that wakes whoever waits on its channel.
type closeSignal chan struct{}

func (c closeSignal) Close() error {
	select {
	case c <- struct{}{}:
	default:
	}
	return nil
}

func ourGateway(c *zktest.Cluster, service string, gone chan struct{}) (*gateway, error) {
	cl, err := sd.NewClient(c.ConnectString(), sd.SessionTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	in, err := sd.NewInstancer(cl, service)
	if err != nil {
		cl.Close()
		return nil, err
	}
	e, err := endpoint.NewEndpointer(in, propFactory(gone))
	if err != nil {
		in.Stop()
		cl.Close()
		return nil, err
	}
	return &gateway{eps: e, gone: gone, close: func() { e.Close(); in.Stop(); cl.Close() }}, nil
}

func gokitGateway(c *zktest.Cluster, service string, gone chan struct{}) (*gateway, error) {
	cl, err := kitzk.NewClient(c.Addrs(), log.NewNopLogger(), kitzk.SessionTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	in, err := kitzk.NewInstancer(cl, "/services/"+service, log.NewNopLogger())
	if err != nil {
		cl.Stop()
		return nil, err
	}
	e := kitsd.NewEndpointer(in, propFactory(gone), log.NewNopLogger())
	return &gateway{eps: e, gone: gone, close: func() { e.Close(); in.Stop(); cl.Stop() }}, nil
}

// left waits until every gateway closed an endpoint and, on that wake,
// routes to n instances; it polls (routed) only when a wake came without
// the set being smaller, which no trial should see.
func left(gws []*gateway, n int, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for _, g := range gws {
		select {
		case <-g.gone:
		case <-t.C:
			return fmt.Errorf("gateways did not close an endpoint within %v", timeout)
		}
		if eps, err := g.eps.Endpoints(); err != nil || len(eps) != n {
			return routed(gws, n, timeout)
		}
	}
	return nil
}

// forgetCloses forgets earlier closes, so that the next wait is for a new one.
func forgetCloses(gws []*gateway) {
	for _, g := range gws {
		select {
		case <-g.gone:
		default:
		}
	}
}

// stageClock is when the last gracekit gateway reached each stage of a
// trial, in nanoseconds from the clock's base (0: not reached).
type stageClock struct {
	base time.Time
	at   [proptrace.Stages]atomic.Int64
}

func (c *stageClock) mark(s proptrace.Stage) {
	now := int64(time.Since(c.base))
	for {
		old := c.at[s].Load()
		if old >= now || c.at[s].CompareAndSwap(old, now) {
			return
		}
	}
}

func (c *stageClock) reset() {
	for i := range c.at {
		c.at[i].Store(0)
	}
}

// since is stage s's time from start, in ms; false when not reached.
func (c *stageClock) since(s proptrace.Stage, start time.Time) (float64, bool) {
	at := c.at[s].Load()
	if at == 0 {
		return 0, false
	}
	return ms(c.base.Add(time.Duration(at)).Sub(start)), true
}

// routed waits until every gateway routes to exactly n instances and
// returns when the last one does.
func routed(gws []*gateway, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		done := true
		for _, g := range gws {
			if eps, err := g.eps.Endpoints(); err != nil || len(eps) != n {
				done = false
				break
			}
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gateways not at %d endpoints after %v", n, timeout)
		}
		time.Sleep(propPoll)
	}
}

func runPropagation() error {
	cluster, writer, done, err := benchServer()
	if err != nil {
		return err
	}
	defer done()

	type side struct {
		service string
		gws     []*gateway
		took    []float64
	}
	var clock *stageClock
	stages := make([][]float64, proptrace.Stages)
	if *propStages {
		clock = &stageClock{base: time.Now()}
		proptrace.SetHook(clock.mark)
		defer proptrace.SetHook(nil)
	}
	sides := []*side{{service: "prop-gracekit"}, {service: "prop-gokit"}}
	for i, mk := range []newGateway{ourGateway, gokitGateway} {
		s := sides[i]
		if err := populate(writer, s.service, propInstances); err != nil {
			return err
		}
		for range propGateways {
			g, err := mk(cluster, s.service, make(chan struct{}, 1))
			if err != nil {
				return err
			}
			defer g.close()
			s.gws = append(s.gws, g)
		}
		if err := routed(s.gws, propInstances, 30*time.Second); err != nil {
			return fmt.Errorf("%s: %w", s.service, err)
		}
	}
	floor, err := newPropFloor(cluster, writer)
	if err != nil {
		return err
	}
	defer floor.close()
	// gateway runs one trial of side s.
	gateway := func(s *side, trial int) error {
		id, data, err := node(s.service, trial%propInstances)
		if err != nil {
			return err
		}
		p := "/services/" + s.service + "/" + id
		forgetCloses(s.gws)
		if clock != nil {
			clock.reset()
		}
		time.Sleep(propSettle)
		start := time.Now()
		if err := writer.Delete(p, -1); err != nil {
			return err
		}
		if err := left(s.gws, propInstances-1, 30*time.Second); err != nil {
			return fmt.Errorf("%s: after deregistration: %w", s.service, err)
		}
		if trial >= 10 {
			s.took = append(s.took, ms(time.Since(start)))
			if clock != nil && s == sides[0] {
				for st := range proptrace.Stages {
					if d, ok := clock.since(st, start); ok {
						stages[st] = append(stages[st], d)
					}
				}
			}
		}
		if _, err := writer.Create(p, data, 0, zk.WorldACL(zk.PermAll)); err != nil {
			return err
		}
		if err := routed(s.gws, propInstances, 30*time.Second); err != nil {
			return fmt.Errorf("%s: after registration: %w", s.service, err)
		}
		return nil
	}
	runs := []func(trial int) error{
		func(trial int) error { return gateway(sides[0], trial) },
		func(trial int) error { return gateway(sides[1], trial) },
		func(trial int) error {
			took, err := floor.trial(trial % propInstances)
			if err == nil && trial >= 10 {
				floor.took = append(floor.took, took)
			}
			return err
		},
	}
	for trial := range propTrials + 10 { // the first 10 warm up and are not counted
		// Each trial starts with another side, so that none always
		// follows the same one.
		for k := range runs {
			if err := runs[(trial+k)%len(runs)](trial); err != nil {
				return err
			}
		}
	}
	if clock != nil {
		for st := range proptrace.Stages {
			fmt.Printf("PROPSTAGE stage=%-10s p50=%sms p99=%sms trials=%d\n", st, num(pct(stages[st], 50)), num(pct(stages[st], 99)), len(stages[st]))
		}
		fmt.Printf("PROPSTAGE stage=%-10s p50=%sms p99=%sms trials=%d\n", "observed", num(pct(sides[0].took, 50)), num(pct(sides[0].took, 99)), len(sides[0].took))
		fmt.Printf("PROPSTAGE stage=%-10s p50=%sms p99=%sms trials=%d\n", "floor", num(pct(floor.took, 50)), num(pct(floor.took, 99)), len(floor.took))
	}
	for _, q := range []float64{50, 99} {
		ours := chunkPct(sides[0].took, propRounds, q)
		reportRounds(fmt.Sprintf("propagation_deregister_p%.0f", q), ours, chunkPct(sides[1].took, propRounds, q), "ms")
		reportFloorRounds(fmt.Sprintf("propagation_deregister_floor_p%.0f", q), ours, chunkPct(floor.took, propRounds, q), "ms")
	}
	return nil
}

// propFloor times the floor of any client's propagation: from the delete
// until propGateways raw watchers, each on its own session with an exists
// watch on the node, got the notification. Its trials are interleaved
// with the gateways', so that the machine's noise falls on all alike, and
// each watch is set when its node is (re-)created, as the gateways read
// the node then: a watch set right before the delete would find the
// connection and its goroutine just run, which no gateway's is.
type propFloor struct {
	writer *zk.Conn
	conns  []*zk.Conn
	armed  [propInstances][]<-chan zk.Event // by node: each watcher's watch
	took   []float64
}

const propFloorService = "prop-floor"

func newPropFloor(cluster *zktest.Cluster, writer *zk.Conn) (*propFloor, error) {
	f := &propFloor{writer: writer}
	if err := populate(writer, propFloorService, propInstances); err != nil {
		return nil, err
	}
	for range propGateways {
		c, _, err := zk.Connect(cluster.Addrs(), 30*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
		if err != nil {
			f.close()
			return nil, err
		}
		f.conns = append(f.conns, c)
	}
	for i := range propInstances {
		if err := f.arm(i); err != nil {
			f.close()
			return nil, err
		}
	}
	return f, nil
}

func (f *propFloor) path(i int) (string, []byte, error) {
	id, data, err := node(propFloorService, i)
	return "/services/" + propFloorService + "/" + id, data, err
}

// arm sets each watcher's exists watch on node i.
func (f *propFloor) arm(i int) error {
	p, _, err := f.path(i)
	if err != nil {
		return err
	}
	f.armed[i] = f.armed[i][:0]
	for _, c := range f.conns {
		ok, _, ev, err := c.ExistsW(p)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%s is missing", p)
		}
		f.armed[i] = append(f.armed[i], ev)
	}
	return nil
}

// trial deletes node i, waits for every watcher's notification, and
// re-creates and re-watches the node (not timed).
func (f *propFloor) trial(i int) (float64, error) {
	p, data, err := f.path(i)
	if err != nil {
		return 0, err
	}
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	time.Sleep(propSettle)
	start := time.Now()
	if err := f.writer.Delete(p, -1); err != nil {
		return 0, err
	}
	for _, ev := range f.armed[i] {
		select {
		case <-ev:
		case <-t.C:
			return 0, fmt.Errorf("no notification of %s within 30s", p)
		}
	}
	took := ms(time.Since(start))
	if _, err := f.writer.Create(p, data, 0, zk.WorldACL(zk.PermAll)); err != nil {
		return 0, err
	}
	return took, f.arm(i)
}

func (f *propFloor) close() {
	for _, c := range f.conns {
		c.Close()
	}
}
