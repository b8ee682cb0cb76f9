package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/gracekit/gracekit/examples/internal/drive"
	"github.com/gracekit/gracekit/examples/internal/history"
)

// The restore fault: the whole ensemble is stopped and started again
// from an older copy of its data (taken before the first round) or from
// none, after the schedule's last round and its quiet. zxids go back, so
// every session that saw more is refused by every server and must be
// given up for a new one (sd/lost.go); the restored validator checks that
// every live provider is registered again and every consumer converges.
const (
	restoreEmpty    = "empty"
	restoreSnapshot = "snapshot"
)

// restoreSpec is whether seed's schedule ends with a restore, and which:
// one seed in two, from a random stream of its own so that the rounds a
// seed draws do not depend on it.
func restoreSpec(seed int64) string {
	r := rand.New(rand.NewPCG(uint64(seed), 0x13198a2e03707344))
	switch r.IntN(4) {
	case 0:
		return restoreEmpty
	case 1:
		return restoreSnapshot
	}
	return ""
}

// snapshotDir is where the restore's copy of a member's data is kept.
func (d *driver) snapshotDir() string { return filepath.Join(d.tmp, "restore-snapshot") }

// takeSnapshot copies a serving member's data (its version-2 directory:
// snapshots, transaction logs and epochs) for a later restore. A log
// copied while the member writes ends at a whole transaction
// (zktest.Cluster.CopyOf).
func (d *driver) takeSnapshot(ctx context.Context) error {
	return retry(ctx, func() error {
		m, err := d.servingMember()
		if err != nil {
			return err
		}
		_ = os.RemoveAll(d.snapshotDir())
		return os.CopyFS(d.snapshotDir(), os.DirFS(filepath.Join(m.Dir(), "data", "version-2")))
	})
}

// restoreEnsemble stops every member, replaces its data with the copy
// (or nothing), starts them again, and gives the driver's own go-zookeeper
// sessions (the truth, the reader) new sessions: go-zookeeper never gives
// a refused session up.
func (d *driver) restoreEnsemble(ctx context.Context, rs *robustState, kind string) (history.Restore, error) {
	res := history.Restore{Kind: kind, From: time.Now()}
	logf("restore: the ensemble restarts %s", map[string]string{restoreEmpty: "empty", restoreSnapshot: "from the copy taken before the first round"}[kind])
	if err := d.cluster.StopAll(); err != nil {
		return res, err
	}
	for _, s := range d.cluster.Servers {
		dst := filepath.Join(s.Dir(), "data", "version-2")
		if err := os.RemoveAll(dst); err != nil {
			return res, err
		}
		if kind == restoreSnapshot {
			if err := os.CopyFS(dst, os.DirFS(d.snapshotDir())); err != nil {
				return res, fmt.Errorf("restore member %d: %w", s.ID, err)
			}
		}
	}
	if err := d.cluster.StartAll(); err != nil {
		return res, err
	}
	res.To = time.Now()
	rs.blind("*", res.From, "restore")
	if err := rs.truth.renew(d.memberAddrs(d.cluster)); err != nil {
		return res, err
	}
	r, err := dialZK(d.memberAddrs(d.cluster), d.zkDialer())
	if err != nil {
		return res, err
	}
	d.zkMu.Lock()
	old := d.reader
	d.reader = r
	d.zkMu.Unlock()
	old.Close()
	for _, g := range d.groups {
		if err := d.waitRoutedAll(ctx, g, res.To); err != nil {
			rs.violation("recovery", fmt.Sprintf("the %s restore: %v", kind, err))
		}
	}
	return res, drive.SleepCtx(ctx, time.Until(res.To.Add(history.RestoreBound(&history.History{SessionTimeout: robustTimeout}, robustBounds)+robustBounds.Converge+time.Second)))
}
