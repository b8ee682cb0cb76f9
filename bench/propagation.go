package main

import (
	"context"
	"fmt"
	"io"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitsd "github.com/go-kit/kit/sd"
	kitzk "github.com/go-kit/kit/sd/zk"
	"github.com/go-kit/log"
	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// The propagation suite: from a provider's deregistration (its node
// deleted) until the last of propGateways gateways no longer routes to it,
// for gracekit (sd.Instancer + endpoint.Endpointer) and go-kit (sd/zk
// Instancer + sd.NewEndpointer), each gateway with its own session as
// separate processes would have. Each side watches a service of its own,
// so a trial wakes only that side's gateways; trials alternate sides.
func init() { register("propagation", runPropagation) }

const (
	propGateways  = 2
	propInstances = 10
	propTrials    = 500 // per side
	propPoll      = 100 * time.Microsecond
)

// gateway is one consumer: an Endpointer over an Instancer over a client.
type gateway struct {
	eps   kitsd.Endpointer
	close func()
}

type newGateway func(c *zktest.Cluster, service string) (*gateway, error)

func propFactory(instance string) (kitendpoint.Endpoint, io.Closer, error) {
	return func(context.Context, any) (any, error) { return instance, nil }, nil, nil
}

func ourGateway(c *zktest.Cluster, service string) (*gateway, error) {
	cl, err := sd.NewClient(c.ConnectString(), sd.SessionTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	in, err := sd.NewInstancer(cl, service)
	if err != nil {
		cl.Close()
		return nil, err
	}
	e, err := endpoint.NewEndpointer(in, propFactory)
	if err != nil {
		in.Stop()
		cl.Close()
		return nil, err
	}
	return &gateway{eps: e, close: func() { e.Close(); in.Stop(); cl.Close() }}, nil
}

func gokitGateway(c *zktest.Cluster, service string) (*gateway, error) {
	cl, err := kitzk.NewClient(c.Addrs(), log.NewNopLogger(), kitzk.SessionTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	in, err := kitzk.NewInstancer(cl, "/services/"+service, log.NewNopLogger())
	if err != nil {
		cl.Stop()
		return nil, err
	}
	e := kitsd.NewEndpointer(in, propFactory, log.NewNopLogger())
	return &gateway{eps: e, close: func() { e.Close(); in.Stop(); cl.Stop() }}, nil
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
	sides := []*side{{service: "prop-gracekit"}, {service: "prop-gokit"}}
	for i, mk := range []newGateway{ourGateway, gokitGateway} {
		s := sides[i]
		if err := populate(writer, s.service, propInstances); err != nil {
			return err
		}
		for range propGateways {
			g, err := mk(cluster, s.service)
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
	for trial := range propTrials + 10 { // the first 10 warm up and are not counted
		for _, s := range sides {
			id, data, err := node(s.service, trial%propInstances)
			if err != nil {
				return err
			}
			p := "/services/" + s.service + "/" + id
			start := time.Now()
			if err := writer.Delete(p, -1); err != nil {
				return err
			}
			if err := routed(s.gws, propInstances-1, 30*time.Second); err != nil {
				return fmt.Errorf("%s: after deregistration: %w", s.service, err)
			}
			if trial >= 10 {
				s.took = append(s.took, ms(time.Since(start)))
			}
			if _, err := writer.Create(p, data, 0, zk.WorldACL(zk.PermAll)); err != nil {
				return err
			}
			if err := routed(s.gws, propInstances, 30*time.Second); err != nil {
				return fmt.Errorf("%s: after registration: %w", s.service, err)
			}
		}
	}
	floor, err := propagationFloor(cluster, writer)
	if err != nil {
		return err
	}
	for _, q := range []float64{50, 99} {
		report(fmt.Sprintf("propagation_deregister_p%.0f", q), pct(sides[0].took, q), pct(sides[1].took, q), "ms")
		reportFloor(fmt.Sprintf("propagation_deregister_floor_p%.0f", q), pct(sides[0].took, q), pct(floor, q), "ms")
	}
	return nil
}

// propagationFloor times the floor of any client's propagation: from the
// delete until propGateways raw watchers, each on its own session with an
// exists watch on the node, got the notification.
func propagationFloor(cluster *zktest.Cluster, writer *zk.Conn) ([]float64, error) {
	const service = "prop-floor"
	if err := populate(writer, service, propInstances); err != nil {
		return nil, err
	}
	var conns []*zk.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range propGateways {
		c, _, err := zk.Connect(cluster.Addrs(), 30*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
	}
	var took []float64
	for trial := range propTrials + 10 {
		id, data, err := node(service, trial%propInstances)
		if err != nil {
			return nil, err
		}
		p := "/services/" + service + "/" + id
		var evs []<-chan zk.Event
		for _, c := range conns {
			_, _, ev, err := c.ExistsW(p)
			if err != nil {
				return nil, err
			}
			evs = append(evs, ev)
		}
		start := time.Now()
		if err := writer.Delete(p, -1); err != nil {
			return nil, err
		}
		for _, ev := range evs {
			select {
			case <-ev:
			case <-time.After(30 * time.Second):
				return nil, fmt.Errorf("no notification of %s within 30s", p)
			}
		}
		if trial >= 10 {
			took = append(took, ms(time.Since(start)))
		}
		if _, err := writer.Create(p, data, 0, zk.WorldACL(zk.PermAll)); err != nil {
			return nil, err
		}
	}
	return took, nil
}
