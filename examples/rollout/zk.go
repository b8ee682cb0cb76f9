package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/examples/internal/zktls"
	"github.com/gracekit/gracekit/sd"
)

type silentLogger struct{}

func (silentLogger) Printf(string, ...any) {}

// checkOwnPath refuses any path the driver does not own: it must be a
// run's base path (basePathPrefix followed by a random suffix, no other
// '/') or lie below base, which must be one.
func checkOwnPath(base, p string) error {
	if rest, ok := strings.CutPrefix(base, basePathPrefix); !ok || rest == "" || strings.Contains(rest, "/") {
		return fmt.Errorf("refusing to touch %q: %q is not a demo base path (%s<hex>)", p, base, basePathPrefix)
	}
	if (p != base && !strings.HasPrefix(p, base+"/")) || path.Clean(p) != p {
		return fmt.Errorf("refusing to touch %q: not in the demo's base path %s", p, base)
	}
	return nil
}

// withZK runs f with a ZooKeeper session on connect, over TLS when sec is
// not nil (-zk-tls); f gets the chroot of the connect string, to prefix to
// every path.
func withZK(ctx context.Context, connect string, sec *sd.TLSConfig, f func(conn *zk.Conn, chroot string) error) error {
	servers, chroot, err := sd.ParseConnectString(connect)
	if err != nil {
		return err
	}
	dialer := func(network, address string, timeout time.Duration) (net.Conn, error) {
		d := net.Dialer{Timeout: timeout}
		return d.DialContext(ctx, network, address)
	}
	if sec != nil {
		if dialer, err = zktls.Wrap(*sec, dialer); err != nil {
			return err
		}
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
	return f(conn, chroot)
}

// deleteNodes removes the given nodes (paths below the connect string's
// chroot, all inside the run's base path) when they exist: instance nodes
// left by a process the driver had to kill, whose session would otherwise
// hold the instance id until it expires.
func deleteNodes(ctx context.Context, connect string, sec *sd.TLSConfig, base string, paths ...string) error {
	for _, p := range paths {
		if err := checkOwnPath(base, p); err != nil {
			return err
		}
	}
	return withZK(ctx, connect, sec, func(conn *zk.Conn, chroot string) error {
		for _, p := range paths {
			if err := conn.Delete(chroot+p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return fmt.Errorf("delete %s: %w", chroot+p, err)
			}
		}
		return nil
	})
}

// deleteTree removes the run's base path and every node below it, when it
// exists.
func deleteTree(ctx context.Context, connect string, sec *sd.TLSConfig, base string) error {
	if err := checkOwnPath(base, base); err != nil {
		return err
	}
	return withZK(ctx, connect, sec, func(conn *zk.Conn, chroot string) error {
		var del func(p string, depth int) error
		del = func(p string, depth int) error {
			if depth > 8 {
				return fmt.Errorf("delete %s: nodes nested deeper than the demo makes them", p)
			}
			for attempt := 0; ; attempt++ {
				children, _, err := conn.Children(p)
				if errors.Is(err, zk.ErrNoNode) {
					return nil
				} else if err != nil {
					return fmt.Errorf("list %s: %w", p, err)
				}
				for _, c := range children {
					if err := del(p+"/"+c, depth+1); err != nil {
						return err
					}
				}
				err = conn.Delete(p, -1)
				// A child created meanwhile: list again, a few times.
				if errors.Is(err, zk.ErrNotEmpty) && attempt < 3 && ctx.Err() == nil {
					continue
				}
				if err != nil && !errors.Is(err, zk.ErrNoNode) {
					return fmt.Errorf("delete %s: %w", p, err)
				}
				return nil
			}
		}
		return del(chroot+base, 0)
	})
}
