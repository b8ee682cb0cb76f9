package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	kitzk "github.com/go-kit/kit/sd/zk"
	"github.com/go-kit/log"
	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// The sessions suite (`go run . -only sessions`): what one consumer
// process that watches sessionsS services costs the ensemble in sessions
// and TCP connections, counted on the server (cons), gracekit through
// consumer.Consumer as users build it, go-kit through sd/zk, on a server
// with ZooKeeper's stock maxClientCnxns (60 per host).
func init() { register("sessions", runSessions) }

const sessionsS = 100

func runSessions() error {
	dir, err := os.MkdirTemp("", "gracekit-sessions-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cluster, err := zktest.Start(dir, serverOptions...) // stock limits
	if err != nil {
		return err
	}
	defer cluster.Close()
	addr := cluster.Addrs()[0]
	writer, _, err := zk.Connect(cluster.Addrs(), 30*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		return err
	}
	defer writer.Close()
	for s := range sessionsS {
		if err := populate(writer, sessionsService(s), 1); err != nil {
			return err
		}
	}
	baseConns, baseSessions, err := consCounts(addr)
	if err != nil {
		return err
	}
	type counts struct{ conns, sessions int }
	measure := func(start func() (stop func(), err error)) (counts, error) {
		stop, err := start()
		if err != nil {
			return counts{}, err
		}
		defer stop()
		conns, sessions, err := consCounts(addr)
		return counts{conns - baseConns, sessions - baseSessions}, err
	}
	ours, err := measure(func() (func(), error) { return ourSessionsConsumer(cluster.ConnectString()) })
	if err != nil {
		return fmt.Errorf("sessions, gracekit: %w", err)
	}
	if err := waitSessions(addr, baseSessions); err != nil {
		return err
	}
	kit, err := measure(func() (func(), error) { return gokitSessionsConsumer(cluster.Addrs()) })
	if err != nil {
		return fmt.Errorf("sessions, gokit: %w", err)
	}
	tag := fmt.Sprintf("s%d", sessionsS)
	reportCount("consumer_zk_sessions_"+tag, ours.sessions, kit.sessions, "")
	reportCount("consumer_zk_connections_"+tag, ours.conns, kit.conns, "")
	return nil
}

func sessionsService(s int) string { return fmt.Sprintf("sess-%03d", s) }

// ourSessionsConsumer loads every service through one consumer.Consumer.
func ourSessionsConsumer(connect string) (stop func(), err error) {
	sess, err := sd.NewSession(connect, sd.SessionTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	c, err := consumer.New(sess)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	stop = func() { _ = c.Stop(context.Background()) }
	for s := range sessionsS {
		in, err := c.Instancer(ctx, sessionsService(s))
		if err == nil && len(in.Instances()) != 1 {
			err = fmt.Errorf("loaded %d instances, want 1", len(in.Instances()))
		}
		if err != nil {
			stop()
			return nil, fmt.Errorf("service %d: %w", s, err)
		}
	}
	return stop, nil
}

// gokitSessionsConsumer loads every service through one sd/zk Client.
func gokitSessionsConsumer(addrs []string) (stop func(), err error) {
	cl, err := kitzk.NewClient(addrs, log.NewNopLogger(), kitzk.SessionTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	var ins []*kitzk.Instancer
	stop = func() {
		for _, in := range ins {
			in.Stop()
		}
		cl.Stop()
	}
	for s := range sessionsS {
		in, err := kitzk.NewInstancer(cl, "/services/"+sessionsService(s), log.NewNopLogger())
		if err != nil {
			stop()
			return nil, err
		}
		ins = append(ins, in)
	}
	return stop, nil
}

// consCounts counts the client connections (less the one asking) and the
// sessions among them that the server lists.
func consCounts(addr string) (conns, sessions int, err error) {
	out, err := fourLetter(addr, "cons")
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(out) {
		if !strings.Contains(line, "/127.0.0.1:") {
			continue
		}
		if strings.Contains(line, "sid=0x") {
			sessions++
		}
		conns++
	}
	return conns - 1, sessions, nil
}

// waitSessions waits until the server holds want sessions again.
func waitSessions(addr string, want int) error {
	return waitAll(30*time.Second, func() bool {
		_, n, err := consCounts(addr)
		return err == nil && n == want
	})
}
