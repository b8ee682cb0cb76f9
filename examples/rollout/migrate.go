package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/examples/internal/drive"
	"github.com/gracekit/gracekit/sd"
)

// The migrate mode's drain: once every provider is a gracekit one with a
// go-kit twin, the driver drains one as `gracekit drain` does (sd.Drain
// on its Curator node, a version-checked setData), keeps the load on for
// drainWatch, and undrains it. A call sent to the drained provider later
// than drainBound after the drain, through any consumer, is counted in
// drained_calls: gracekit's gateway drops it at OUT_OF_SERVICE (and its
// flush), go-kit's stock consumer when the provider deletes its twin.
const (
	drainBound = time.Second
	drainWatch = 1500 * time.Millisecond
)

// drainInfo is what the migrate mode's drain did.
type drainInfo struct {
	ID        string
	At, Until time.Time // the drain and the undrain
	Calls     []int     // calls the drained provider got after the bound, by consumer
}

// rewriteNode applies f (sd.Drain or sd.Undrain) to the node p, below
// base, with a version-checked setData, as gracekit drain does.
func rewriteNode(ctx context.Context, connect string, sec *sd.TLSConfig, base, service, id string, f func(sd.Codec, string, string, []byte) ([]byte, error)) error {
	p := base + "/" + service + "/" + id
	if err := checkOwnPath(base, p); err != nil {
		return err
	}
	return withZK(ctx, connect, sec, func(conn *zk.Conn, chroot string) error {
		for attempt := 0; ; attempt++ {
			data, stat, err := conn.Get(chroot + p)
			if err != nil {
				return fmt.Errorf("read %s: %w", p, err)
			}
			out, err := f(sd.MixedCodec{}, service, id, data)
			if err != nil {
				return err
			}
			_, err = conn.Set(chroot+p, out, stat.Version)
			if err == zk.ErrBadVersion && attempt < 5 {
				continue // its Registrar wrote meanwhile
			}
			if err != nil {
				return fmt.Errorf("write %s: %w", p, err)
			}
			return nil
		}
	})
}

// drainUnderLoad drains the provider in, watches the load for drainWatch,
// and undrains it, waiting until the consumers that watch ZooKeeper route
// to it again.
func (d *driver) drainUnderLoad(ctx context.Context, base, tag string, ld *load, in *instance, consumers int, watching []int) (*drainInfo, error) {
	info := &drainInfo{ID: in.id, Calls: make([]int, consumers)}
	logf("[%s] drain %s under load, as gracekit drain does (%d requests so far)", tag, in.id, ld.completed.Load())
	info.At = time.Now()
	if err := rewriteNode(ctx, d.zkConnect, d.zkTLS, base, in.service, in.id, sd.Drain); err != nil {
		return nil, fmt.Errorf("drain %s: %w", in.id, err)
	}
	if err := drive.SleepCtx(ctx, drainBound+drainWatch); err != nil {
		return nil, err
	}
	info.Until = time.Now()
	if err := rewriteNode(ctx, d.zkConnect, d.zkTLS, base, in.service, in.id, sd.Undrain); err != nil {
		return nil, fmt.Errorf("undrain %s: %w", in.id, err)
	}
	for deadline := time.Now().Add(10 * time.Second); !ld.seenSince(in.id, info.Until, watching) && !ld.ended(); {
		if time.Now().After(deadline) {
			logf("[%s] warning: the gateways did not route to %s within 10s of its undrain", tag, in.id)
			break
		}
		if err := drive.SleepCtx(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
	logf("[%s] undrained %s after %.0fms", tag, in.id, ms(info.Until.Sub(info.At)))
	return info, nil
}

// count fills Calls from the samples: sent after the bound, before the
// undrain, answered by the drained provider.
func (info *drainInfo) count(samples []sample) {
	from := info.At.Add(drainBound)
	for _, s := range samples {
		if s.instance == info.ID && s.at.After(from) && s.at.Before(info.Until) {
			info.Calls[s.consumer]++
		}
	}
}

// drainedCallsFields is the RESULT line's drained_calls_<consumer>=n.
func drainedCallsFields(info *drainInfo, names []string) string {
	var b strings.Builder
	for i, n := range info.Calls {
		fmt.Fprintf(&b, " drained_calls_%s=%d", strings.ReplaceAll(names[i], "-", ""), n)
	}
	return b.String()
}
