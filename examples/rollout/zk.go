package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/sd"
)

type silentLogger struct{}

func (silentLogger) Printf(string, ...any) {}

// deleteNodes removes the given nodes (paths below the connect string's
// chroot) when they exist: instance nodes left by a process the driver had
// to kill, whose session would otherwise hold the instance id until it
// expires. Only the demo's own instance ids are ever passed.
func deleteNodes(ctx context.Context, connect string, paths ...string) error {
	servers, chroot, err := sd.ParseConnectString(connect)
	if err != nil {
		return err
	}
	dialer := func(network, address string, timeout time.Duration) (net.Conn, error) {
		d := net.Dialer{Timeout: timeout}
		return d.DialContext(ctx, network, address)
	}
	conn, events, err := zk.Connect(servers, 4*time.Second,
		zk.WithLogInfo(false), zk.WithLogger(silentLogger{}), zk.WithDialer(dialer))
	if err != nil {
		return err
	}
	defer conn.Close()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
wait:
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				break wait
			}
		case <-timer.C:
			return fmt.Errorf("no ZooKeeper session with %v within 10s", servers)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, p := range paths {
		if err := conn.Delete(chroot+p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return fmt.Errorf("delete %s: %w", chroot+p, err)
		}
	}
	return nil
}
