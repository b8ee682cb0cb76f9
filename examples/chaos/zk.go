package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/examples/internal/drive"
	"github.com/gracekit/gracekit/sd"
)

type silentLogger struct{}

func (silentLogger) Printf(string, ...any) {}

// zkReader is the driver's own ZooKeeper session, straight to the
// ensemble, used only to read the provider nodes' creation (czxid). The
// client reconnects, and makes a new session, by itself.
type zkReader struct {
	conn *zk.Conn
}

func dialZK(servers []string, dial zk.Dialer) (*zkReader, error) {
	conn, events, err := connectZK(servers, dial)
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(15 * time.Second)
	defer timer.Stop()
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go func() { // keep draining: a full channel drops events
					for range events {
					}
				}()
				return &zkReader{conn: conn}, nil
			}
		case <-timer.C:
			conn.Close()
			return nil, fmt.Errorf("no ZooKeeper session with %v within 15s", servers)
		}
	}
}

func (r *zkReader) Close() { r.conn.Close() }

// connectZK opens one of the driver's own sessions, through dial (nil:
// go-zookeeper's own, net.DialTimeout).
func connectZK(servers []string, dial zk.Dialer) (*zk.Conn, <-chan zk.Event, error) {
	if dial == nil {
		dial = net.DialTimeout
	}
	return zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(silentLogger{}), zk.WithDialer(dial))
}

// czxids reads each path's czxid; 0 when the node does not exist.
func (r *zkReader) czxids(paths map[string]string) (map[string]int64, error) {
	out := make(map[string]int64, len(paths))
	for id, p := range paths {
		ok, stat, err := r.conn.Exists(p)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		if ok {
			out[id] = stat.Czxid
		} else {
			out[id] = 0
		}
	}
	return out, nil
}

// owner is the session that owns the ephemeral node at path.
func (r *zkReader) owner(path string) (int64, error) {
	ok, stat, err := r.conn.Exists(path)
	switch {
	case err != nil:
		return 0, fmt.Errorf("read %s: %w", path, err)
	case !ok || stat.EphemeralOwner == 0:
		return 0, fmt.Errorf("%s: no ephemeral node", path)
	}
	return stat.EphemeralOwner, nil
}

// waitCzxids reads the czxids until cond accepts them or limit passes
// (ZooKeeper may be electing or reconnecting meanwhile). It returns the
// last read and the time of the read that satisfied cond.
func (r *zkReader) waitCzxids(ctx context.Context, paths map[string]string, limit time.Duration,
	cond func(map[string]int64) bool) (map[string]int64, time.Time, error) {
	deadline := time.Now().Add(limit)
	var last map[string]int64
	var lastErr error
	for {
		at := time.Now()
		got, err := r.czxids(paths)
		if err == nil {
			last, lastErr = got, nil
			if cond(got) {
				return got, at, nil
			}
		} else {
			lastErr = err
		}
		if time.Now().After(deadline) {
			if lastErr != nil {
				return last, time.Time{}, lastErr
			}
			return last, time.Time{}, errors.New("condition not met")
		}
		if err := drive.SleepCtx(ctx, 100*time.Millisecond); err != nil {
			return last, time.Time{}, err
		}
	}
}

// changed lists the ids whose czxid differs between before and after
// (re-created, or gone), in the order of ids.
func changed(ids []string, before, after map[string]int64) []string {
	var out []string
	for _, id := range ids {
		if before[id] != after[id] {
			out = append(out, id)
		}
	}
	return out
}

// drain takes the instance at p out of rotation as gracekit drain does
// (sd.Drain's marker and OUT_OF_SERVICE, a version-checked write), or
// puts it back (undrain).
func (r *zkReader) drain(service, p string, undrain bool) error {
	data, st, err := r.conn.Get(p)
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	rewrite := sd.Drain
	if undrain {
		rewrite = sd.Undrain
	}
	out, err := rewrite(sd.CuratorCodec{}, service, path.Base(p), data)
	if err != nil {
		return err
	}
	if _, err := r.conn.Set(p, out, st.Version); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}
