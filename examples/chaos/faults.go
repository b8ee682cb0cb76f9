package main

import (
	"context"
	"fmt"
	"maps"
	"syscall"
	"time"

	"github.com/gracekit/gracekit/examples/internal/drive"
	"github.com/gracekit/gracekit/zktest"
)

// fault runs one fault of the matrix with the load running, sets ph.end,
// and waits until the gateways route to every live provider again.
func (d *driver) fault(ctx context.Context, name string, ph *phase) error {
	switch name {
	case "leader":
		return d.faultLeader(ctx, ph)
	case "ensemble":
		return d.faultEnsemble(ctx, ph)
	case "session":
		return d.faultSession(ctx, ph)
	case "partition":
		return d.faultPartition(ctx, ph)
	case "kill":
		return d.faultKill(ctx, ph)
	case "rolling":
		return d.faultRolling(ctx, ph)
	}
	return fmt.Errorf("unknown fault %q", name)
}

// nodePaths maps each provider id to its node's path.
func (d *driver) nodePaths() map[string]string {
	m := map[string]string{}
	for _, p := range d.providers {
		m[p.id] = d.basePath + "/" + providerService + "/" + p.id
	}
	return m
}

func (d *driver) providerIDs() []string {
	ids := make([]string, len(d.providers))
	for i, p := range d.providers {
		ids[i] = p.id
	}
	return ids
}

// allRegistered reads the provider nodes until every one exists.
func (d *driver) allRegistered(ctx context.Context) (map[string]int64, error) {
	got, _, err := d.reader.waitCzxids(ctx, d.nodePaths(), d.cfg.recoverLimit, func(m map[string]int64) bool {
		for _, z := range m {
			if z == 0 {
				return false
			}
		}
		return true
	})
	if err != nil {
		return got, fmt.Errorf("provider nodes %v (czxid, 0: missing) not all registered within %v: %w", got, d.cfg.recoverLimit, err)
	}
	return got, nil
}

// routeAll asks for every provider routed to after t.
func (d *driver) routeAll(t time.Time) map[string]time.Time {
	m := map[string]time.Time{}
	for _, p := range d.providers {
		m[p.id] = t
	}
	return m
}

// waitRecovered waits until both gateways have answered with every
// provider of ph.routeAfter for a request sent after its time.
func (d *driver) waitRecovered(ctx context.Context, ph *phase) error {
	deadline := time.Now().Add(d.cfg.recoverLimit)
	for !d.load.routedSince(ph.routeAfter) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the gateways did not route to every provider of %v within %v of the fault's end",
				keys(ph.routeAfter), d.cfg.recoverLimit)
		}
		if err := drive.SleepCtx(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
	ph.recovered = time.Now()
	return nil
}

func keys(m map[string]time.Time) []string {
	var out []string
	for k := range maps.Keys(m) {
		out = append(out, k)
	}
	return out
}

// checkAlive fails when a provider or gateway ended on its own.
func (d *driver) checkAlive(ph *phase) error {
	for _, in := range append(append([]*instance{}, d.providers...), d.gateways...) {
		if in.proc.Exited() {
			return fmt.Errorf("%s exited (%s) during the fault; its log %s ends with:\n%s",
				in.id, in.proc.ExitString(), in.proc.LogPath(), drive.Tail(in.proc.LogPath(), 20))
		}
	}
	return nil
}

// faultLeader kills the ensemble's leader, lets the others elect, holds
// a few seconds, and restarts it. No provider node may flap.
func (d *driver) faultLeader(ctx context.Context, ph *phase) error {
	ph.mustNotFlap = true
	before, err := d.allRegistered(ctx)
	if err != nil {
		return err
	}
	leader, err := d.cluster.Leader()
	if err != nil {
		return err
	}
	killAt := time.Now()
	logf("SIGKILL ZooKeeper member %d (the leader)", leader.ID)
	if err := leader.Kill(); err != nil {
		return err
	}
	if err := d.cluster.WaitServing(d.cfg.recoverLimit); err != nil {
		return err
	}
	elected := time.Since(killAt)
	next, err := d.cluster.Leader()
	if err != nil {
		return err
	}
	logf("member %d leads %.0fms after the kill", next.ID, ms(elected))
	if err := drive.SleepCtx(ctx, d.cfg.leaderDown); err != nil {
		return err
	}
	if err := d.cluster.Restart(leader); err != nil {
		return err
	}
	ph.end = time.Now()
	logf("member %d restarted and serving", leader.ID)
	ph.note = fmt.Sprintf("member %d (leader) killed; member %d led %.0fms later; old leader back after %.1fs",
		leader.ID, next.ID, ms(elected), ph.end.Sub(killAt).Seconds())
	ph.routeAfter = d.routeAll(ph.end)
	if err := d.waitRecovered(ctx, ph); err != nil {
		return err
	}
	// A session lost to the election would expire within its timeout
	// (10 s) of the kill: look at the nodes after it.
	if err := drive.SleepCtx(ctx, time.Until(killAt.Add(12*time.Second))); err != nil {
		return err
	}
	after, err := d.allRegistered(ctx)
	ph.flapped = changed(d.providerIDs(), before, after)
	return err
}

// faultEnsemble stops every member, keeps the ensemble down, and starts
// it again with its data.
func (d *driver) faultEnsemble(ctx context.Context, ph *phase) error {
	before, err := d.allRegistered(ctx)
	if err != nil {
		return err
	}
	logf("stopping the whole ensemble for %v", d.cfg.ensembleDown)
	if err := d.cluster.StopAll(); err != nil {
		return err
	}
	downAt := time.Now()
	if err := drive.SleepCtx(ctx, d.cfg.ensembleDown); err != nil {
		return err
	}
	if err := d.cluster.StartAll(); err != nil {
		return err
	}
	ph.end = time.Now()
	logf("ensemble back after %.1fs (%.1fs to serve)", ph.end.Sub(downAt).Seconds(), ph.end.Sub(downAt.Add(d.cfg.ensembleDown)).Seconds())
	ph.note = fmt.Sprintf("ensemble down %.1fs", ph.end.Sub(downAt).Seconds())
	ph.routeAfter = d.routeAll(ph.end)
	if err := d.waitRecovered(ctx, ph); err != nil {
		return err
	}
	after, err := d.allRegistered(ctx)
	ph.flapped = changed(d.providerIDs(), before, after)
	return err
}

// reRegistered waits until target's node exists with a czxid other than
// before's, and returns when the driver saw it.
func (d *driver) reRegistered(ctx context.Context, target *instance, before map[string]int64) (time.Time, error) {
	paths := map[string]string{target.id: d.nodePaths()[target.id]}
	got, at, err := d.reader.waitCzxids(ctx, paths, d.cfg.recoverLimit, func(m map[string]int64) bool {
		return m[target.id] != 0 && m[target.id] != before[target.id]
	})
	if err != nil {
		return at, fmt.Errorf("%s did not register again within %v (czxid before %d, now %d): %w",
			target.id, d.cfg.recoverLimit, before[target.id], got[target.id], err)
	}
	return at, nil
}

// servingMember is the address of a running member.
func (d *driver) servingMember() (*zktest.Server, error) {
	for _, s := range d.cluster.Servers {
		if s.Running() {
			if _, err := s.Mode(); err == nil {
				return s, nil
			}
		}
	}
	return nil, fmt.Errorf("no ZooKeeper member serves")
}

// faultSession expires the first provider's session.
func (d *driver) faultSession(ctx context.Context, ph *phase) error {
	target := d.providers[0]
	before, err := d.allRegistered(ctx)
	if err != nil {
		return err
	}
	m, err := d.servingMember()
	if err != nil {
		return err
	}
	id, err := target.proxy.Expire(m.Addr())
	if err != nil {
		return err
	}
	ph.end = time.Now()
	logf("expired %s's session 0x%x", target.id, id)
	again, err := d.reRegistered(ctx, target, before)
	if err != nil {
		return err
	}
	logf("%s registered again %.0fms after the expiry", target.id, ms(again.Sub(ph.end)))
	ph.note = fmt.Sprintf("%s session 0x%x expired; registered again after %.0fms", target.id, id, ms(again.Sub(ph.end)))
	return d.recoverReregistered(ctx, ph, target, again, before)
}

// faultPartition cuts the second provider off from ZooKeeper, longer
// than its session timeout, and heals.
func (d *driver) faultPartition(ctx context.Context, ph *phase) error {
	target := d.providers[1]
	before, err := d.allRegistered(ctx)
	if err != nil {
		return err
	}
	logf("cutting %s off from ZooKeeper for %v", target.id, d.cfg.partition)
	target.proxy.Cut()
	cutAt := time.Now()
	// Watch its node go while the partition lasts (its session expires
	// on the ensemble's side).
	var goneAt time.Time
	paths := map[string]string{target.id: d.nodePaths()[target.id]}
	if _, at, err := d.reader.waitCzxids(ctx, paths, d.cfg.partition, func(m map[string]int64) bool { return m[target.id] == 0 }); err == nil {
		goneAt = at
	} else if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := drive.SleepCtx(ctx, time.Until(cutAt.Add(d.cfg.partition))); err != nil {
		return err
	}
	target.proxy.Heal()
	ph.end = time.Now()
	logf("healed %s's partition", target.id)
	again, err := d.reRegistered(ctx, target, before)
	if err != nil {
		return err
	}
	gone := "its node stayed"
	if !goneAt.IsZero() {
		gone = fmt.Sprintf("its node went after %.1fs", goneAt.Sub(cutAt).Seconds())
	}
	logf("%s registered again %.0fms after the heal (%s)", target.id, ms(again.Sub(ph.end)), gone)
	ph.note = fmt.Sprintf("%s cut off %.1fs, %s; registered again %.0fms after the heal",
		target.id, ph.end.Sub(cutAt).Seconds(), gone, ms(again.Sub(ph.end)))
	return d.recoverReregistered(ctx, ph, target, again, before)
}

// faultKill kills the third provider with SIGKILL, waits until its node
// goes with its session, and starts it again on a new port. The fault
// ends when the new process is ready.
func (d *driver) faultKill(ctx context.Context, ph *phase) error {
	target := d.providers[2]
	before, err := d.allRegistered(ctx)
	if err != nil {
		return err
	}
	ph.killedAddr = target.addr()
	ph.killAt = time.Now()
	logf("SIGKILL %s (%s)", target.id, ph.killedAddr)
	target.proc.Signal(syscall.SIGKILL)
	<-target.proc.Done()
	paths := map[string]string{target.id: d.nodePaths()[target.id]}
	_, goneAt, err := d.reader.waitCzxids(ctx, paths, d.cfg.recoverLimit, func(m map[string]int64) bool { return m[target.id] == 0 })
	if err != nil {
		return fmt.Errorf("the node of the killed %s did not go within %v: %w", target.id, d.cfg.recoverLimit, err)
	}
	logf("%s's node went %.1fs after the kill (session timeout); starting it again", target.id, goneAt.Sub(ph.killAt).Seconds())
	if err := d.startInstance(target); err != nil {
		return err
	}
	if err := waitReady(ctx, target, d.cfg.readyLimit); err != nil {
		return err
	}
	ph.end = time.Now()
	ph.note = fmt.Sprintf("%s killed; its node went after %.1fs; back on port %d, ready %.1fs after the kill",
		target.id, goneAt.Sub(ph.killAt).Seconds(), target.port, ph.end.Sub(ph.killAt).Seconds())
	ph.routeAfter = d.routeAll(ph.end)
	if err := d.waitRecovered(ctx, ph); err != nil {
		return err
	}
	after, err := d.allRegistered(ctx)
	ph.flapped = changed(d.providerIDs(), before, after)
	return err
}

// faultRolling stops one member (a follower), restarts every provider in
// turn (SIGTERM, a new process on a new port, on once both gateways route
// to it), and starts the member again once the gateways route to all.
func (d *driver) faultRolling(ctx context.Context, ph *phase) error {
	before, err := d.allRegistered(ctx)
	if err != nil {
		return err
	}
	var member *zktest.Server
	for _, s := range d.cluster.Servers {
		if mode, err := s.Mode(); err == nil && mode == "follower" {
			member = s
			break
		}
	}
	if member == nil {
		return fmt.Errorf("no follower to stop")
	}
	logf("stopping ZooKeeper member %d (a follower)", member.ID)
	if err := member.Stop(); err != nil {
		return err
	}
	memberDown := time.Now()
	var stops []string
	for _, p := range d.providers {
		sig := time.Now()
		killed := p.proc.Stop(syscall.SIGTERM, d.cfg.stopLimit)
		if killed {
			return fmt.Errorf("%s did not stop within %v of SIGTERM; its log %s ends with:\n%s",
				p.id, d.cfg.stopLimit, p.proc.LogPath(), drive.Tail(p.proc.LogPath(), 20))
		}
		stopped := p.proc.ExitedAt().Sub(sig)
		if err := d.startInstance(p); err != nil {
			return err
		}
		if err := waitReady(ctx, p, d.cfg.readyLimit); err != nil {
			return err
		}
		ready := time.Now()
		deadline := ready.Add(d.cfg.recoverLimit)
		for !d.load.routedSince(map[string]time.Time{p.id: ready}) {
			if time.Now().After(deadline) {
				return fmt.Errorf("the gateways did not route to the restarted %s within %v", p.id, d.cfg.recoverLimit)
			}
			if err := drive.SleepCtx(ctx, 10*time.Millisecond); err != nil {
				return err
			}
		}
		logf("%s stopped in %.0fms, back on port %d, routed %.0fms after SIGTERM", p.id, ms(stopped), p.port, ms(time.Since(sig)))
		stops = append(stops, fmt.Sprintf("%s %.0fms", p.id, ms(stopped)))
		ph.end = ready
	}
	ph.routeAfter = d.routeAll(ph.end)
	if err := d.waitRecovered(ctx, ph); err != nil {
		return err
	}
	if err := d.cluster.Restart(member); err != nil {
		return err
	}
	logf("member %d back after %.1fs", member.ID, time.Since(memberDown).Seconds())
	ph.note = fmt.Sprintf("member %d down %.1fs; graceful stops: %v", member.ID, time.Since(memberDown).Seconds(), stops)
	after, err := d.allRegistered(ctx)
	ph.flapped = changed(d.providerIDs(), before, after)
	return err
}

// recoverReregistered ends a fault after which target registered again at
// again: every provider must be routed to after the fault's end (target
// after its new registration), and the nodes are compared with before.
func (d *driver) recoverReregistered(ctx context.Context, ph *phase, target *instance, again time.Time, before map[string]int64) error {
	ph.routeAfter = d.routeAll(ph.end)
	ph.routeAfter[target.id] = again
	if err := d.waitRecovered(ctx, ph); err != nil {
		return err
	}
	after, err := d.allRegistered(ctx)
	ph.flapped = changed(d.providerIDs(), before, after)
	return err
}
