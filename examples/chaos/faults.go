package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gracekit/gracekit/examples/internal/drive"
	"github.com/gracekit/gracekit/examples/internal/history"
	"github.com/gracekit/gracekit/internal/failpoint"
	"github.com/gracekit/gracekit/zktest"
)

// fault runs one fault of the matrix with the load running, on every
// group at once (phs[i] is d.groups[i]'s phase), sets each phase's end,
// and waits until each group's gateways route to every live provider
// again.
func (d *driver) fault(ctx context.Context, name string, phs []*phase) error {
	switch name {
	case "leader":
		return d.faultLeader(ctx, phs)
	case "ensemble":
		return d.faultEnsemble(ctx, phs)
	case "session":
		return d.faultSession(ctx, phs)
	case "partition":
		return d.faultPartition(ctx, phs)
	case "kill":
		return d.faultKill(ctx, phs)
	case "rolling":
		return d.faultRolling(ctx, phs)
	}
	return fmt.Errorf("unknown fault %q", name)
}

// nodePaths maps each provider id of g to its node's path.
func (d *driver) nodePaths(g *group) map[string]string {
	m := map[string]string{}
	for _, p := range g.providers {
		m[p.id] = d.basePath + "/" + p.service + "/" + p.id
	}
	return m
}

func (g *group) providerIDs() []string {
	ids := make([]string, len(g.providers))
	for i, p := range g.providers {
		ids[i] = p.id
	}
	return ids
}

// allRegistered reads g's provider nodes until every one exists.
func (d *driver) allRegistered(ctx context.Context, g *group) (map[string]int64, error) {
	got, _, err := d.reader.waitCzxids(ctx, d.nodePaths(g), d.cfg.recoverLimit, func(m map[string]int64) bool {
		for _, z := range m {
			if z == 0 {
				return false
			}
		}
		return true
	})
	if err != nil {
		return got, fmt.Errorf("%sprovider nodes %v (czxid, 0: missing) not all registered within %v: %w", g.tag(), got, d.cfg.recoverLimit, err)
	}
	return got, nil
}

// registeredAll is allRegistered for every group, in d.groups' order.
func (d *driver) registeredAll(ctx context.Context) ([]map[string]int64, error) {
	out := make([]map[string]int64, len(d.groups))
	for i, g := range d.groups {
		var err error
		if out[i], err = d.allRegistered(ctx, g); err != nil {
			return out, err
		}
	}
	return out, nil
}

// flappedAll sets each phase's flapped from before and a new read.
func (d *driver) flappedAll(ctx context.Context, phs []*phase, before []map[string]int64) error {
	after, err := d.registeredAll(ctx)
	for i, g := range d.groups {
		phs[i].flapped = changed(g.providerIDs(), before[i], after[i])
	}
	return err
}

// routeAll asks for every provider of g routed to after t.
func (g *group) routeAll(t time.Time) map[string]time.Time {
	m := map[string]time.Time{}
	for _, p := range g.providers {
		m[p.id] = t
	}
	return m
}

// waitRecovered waits until g's gateways have answered with every
// provider of ph.routeAfter for a request sent after its time.
func (d *driver) waitRecovered(ctx context.Context, g *group, ph *phase) error {
	deadline := time.Now().Add(d.cfg.recoverLimit)
	for !g.load.routedSince(ph.routeAfter) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%sthe gateways did not route to every provider of %v within %v of the fault's end",
				g.tag(), keys(ph.routeAfter), d.cfg.recoverLimit)
		}
		if err := drive.SleepCtx(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
	ph.recovered = time.Now()
	return nil
}

// endAll ends every group's phase at end with note, asks for every
// provider routed to again, and waits for it.
func (d *driver) endAll(ctx context.Context, phs []*phase, end time.Time, note string) error {
	for i, g := range d.groups {
		phs[i].end, phs[i].note, phs[i].routeAfter = end, note, g.routeAll(end)
	}
	for i, g := range d.groups {
		if err := d.waitRecovered(ctx, g, phs[i]); err != nil {
			return err
		}
	}
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
func (d *driver) checkAlive() error {
	for _, in := range d.instances() {
		if in.proc.Exited() {
			return fmt.Errorf("%s exited (%s) during the fault; its log %s ends with:\n%s",
				in.id, in.proc.ExitString(), in.proc.LogPath(), drive.Tail(in.proc.LogPath(), 20))
		}
	}
	return nil
}

// faultLeader kills the ensemble's leader, lets the others elect, holds
// a few seconds, and restarts it. No provider node may flap.
func (d *driver) faultLeader(ctx context.Context, phs []*phase) error {
	for _, ph := range phs {
		ph.mustNotFlap = true
	}
	before, err := d.registeredAll(ctx)
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
	// Serving members may still be electing: wait for a leader.
	next, err := d.cluster.Leader()
	for deadline := killAt.Add(d.cfg.recoverLimit); err != nil && time.Now().Before(deadline); next, err = d.cluster.Leader() {
		if err := drive.SleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	if err != nil {
		return err
	}
	elected := time.Since(killAt)
	logf("member %d leads %.0fms after the kill", next.ID, ms(elected))
	if err := drive.SleepCtx(ctx, d.cfg.leaderDown); err != nil {
		return err
	}
	if err := d.cluster.Restart(leader); err != nil {
		return err
	}
	end := time.Now()
	logf("member %d restarted and serving", leader.ID)
	note := fmt.Sprintf("member %d (leader) killed; member %d led %.0fms later; old leader back after %.1fs",
		leader.ID, next.ID, ms(elected), end.Sub(killAt).Seconds())
	if err := d.endAll(ctx, phs, end, note); err != nil {
		return err
	}
	// A session lost to the election would expire within its timeout
	// (10 s) of the kill: look at the nodes after it.
	if err := drive.SleepCtx(ctx, time.Until(killAt.Add(12*time.Second))); err != nil {
		return err
	}
	return d.flappedAll(ctx, phs, before)
}

// faultEnsemble stops every member, keeps the ensemble down, and starts
// it again with its data.
func (d *driver) faultEnsemble(ctx context.Context, phs []*phase) error {
	before, err := d.registeredAll(ctx)
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
	end := time.Now()
	logf("ensemble back after %.1fs (%.1fs to serve)", end.Sub(downAt).Seconds(), end.Sub(downAt.Add(d.cfg.ensembleDown)).Seconds())
	if err := d.endAll(ctx, phs, end, fmt.Sprintf("ensemble down %.1fs", end.Sub(downAt).Seconds())); err != nil {
		return err
	}
	return d.flappedAll(ctx, phs, before)
}

// reRegistered waits until target's node exists with a czxid other than
// before's, and returns when the driver saw it.
func (d *driver) reRegistered(ctx context.Context, g *group, target *instance, before map[string]int64) (time.Time, error) {
	paths := map[string]string{target.id: d.nodePaths(g)[target.id]}
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

// faultSession expires the session of each group's first provider: the
// one that owns its node.
func (d *driver) faultSession(ctx context.Context, phs []*phase) error {
	before, err := d.registeredAll(ctx)
	if err != nil {
		return err
	}
	m, err := d.servingMember()
	if err != nil {
		return err
	}
	ids := make([]int64, len(d.groups))
	for i, g := range d.groups {
		target := g.providers[0]
		if ids[i], err = d.reader.owner(d.nodePaths(g)[target.id]); err != nil {
			return err
		}
		if err := target.proxy.Expire(d.memberAddr(m), ids[i]); err != nil {
			return fmt.Errorf("%s: %w", target.id, err)
		}
	}
	end := time.Now()
	for i, g := range d.groups {
		target, ph := g.providers[0], phs[i]
		ph.end = end
		logf("expired %s's session 0x%x", target.id, ids[i])
		again, err := d.reRegistered(ctx, g, target, before[i])
		if err != nil {
			return err
		}
		logf("%s registered again %.0fms after the expiry", target.id, ms(again.Sub(end)))
		ph.note = fmt.Sprintf("%s session 0x%x expired; registered again after %.0fms", target.id, ids[i], ms(again.Sub(end)))
		if err := d.recoverReregistered(ctx, g, ph, target, again, before[i]); err != nil {
			return err
		}
	}
	return nil
}

// faultPartition cuts each group's second provider off from ZooKeeper,
// longer than its session timeout, and heals.
func (d *driver) faultPartition(ctx context.Context, phs []*phase) error {
	before, err := d.registeredAll(ctx)
	if err != nil {
		return err
	}
	for _, g := range d.groups {
		logf("cutting %s off from ZooKeeper for %v", g.providers[1].id, d.cfg.partition)
		g.providers[1].proxy.Cut()
	}
	cutAt := time.Now()
	// Watch the nodes go while the partition lasts (the sessions expire
	// on the ensemble's side).
	goneAt := make([]time.Time, len(d.groups))
	for i, g := range d.groups {
		target := g.providers[1]
		paths := map[string]string{target.id: d.nodePaths(g)[target.id]}
		if _, at, err := d.reader.waitCzxids(ctx, paths, time.Until(cutAt.Add(d.cfg.partition)), func(m map[string]int64) bool { return m[target.id] == 0 }); err == nil {
			goneAt[i] = at
		} else if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if err := drive.SleepCtx(ctx, time.Until(cutAt.Add(d.cfg.partition))); err != nil {
		return err
	}
	for _, g := range d.groups {
		g.providers[1].proxy.Heal()
	}
	end := time.Now()
	for i, g := range d.groups {
		target, ph := g.providers[1], phs[i]
		ph.end = end
		logf("healed %s's partition", target.id)
		again, err := d.reRegistered(ctx, g, target, before[i])
		if err != nil {
			return err
		}
		gone := "its node stayed"
		if !goneAt[i].IsZero() {
			gone = fmt.Sprintf("its node went after %.1fs", goneAt[i].Sub(cutAt).Seconds())
		}
		logf("%s registered again %.0fms after the heal (%s)", target.id, ms(again.Sub(end)), gone)
		ph.note = fmt.Sprintf("%s cut off %.1fs, %s; registered again %.0fms after the heal",
			target.id, end.Sub(cutAt).Seconds(), gone, ms(again.Sub(end)))
		if err := d.recoverReregistered(ctx, g, ph, target, again, before[i]); err != nil {
			return err
		}
	}
	return nil
}

// faultKill kills each group's third provider with SIGKILL, waits until
// its node goes with its session, and starts it again on a new port. The
// fault ends when the new processes are ready.
func (d *driver) faultKill(ctx context.Context, phs []*phase) error {
	before, err := d.registeredAll(ctx)
	if err != nil {
		return err
	}
	for i, g := range d.groups {
		target := g.providers[2]
		phs[i].killedAddr, phs[i].killAt = target.addr(), time.Now()
		logf("SIGKILL %s (%s)", target.id, target.addr())
		target.proc.Signal(syscall.SIGKILL)
	}
	goneAt := make([]time.Time, len(d.groups))
	for i, g := range d.groups {
		target := g.providers[2]
		<-target.proc.Done()
		phs[i].deadAt = target.proc.ExitedAt()
		paths := map[string]string{target.id: d.nodePaths(g)[target.id]}
		var err error
		if _, goneAt[i], err = d.reader.waitCzxids(ctx, paths, d.cfg.recoverLimit, func(m map[string]int64) bool { return m[target.id] == 0 }); err != nil {
			return fmt.Errorf("the node of the killed %s did not go within %v: %w", target.id, d.cfg.recoverLimit, err)
		}
		logf("%s's node went %.1fs after the kill (session timeout); starting it again", target.id, goneAt[i].Sub(phs[i].killAt).Seconds())
		if err := d.startInstance(target); err != nil {
			return err
		}
	}
	for _, g := range d.groups {
		if err := waitReady(ctx, g.providers[2], d.cfg.readyLimit); err != nil {
			return err
		}
	}
	end := time.Now()
	for i, g := range d.groups {
		target, ph := g.providers[2], phs[i]
		ph.end, ph.routeAfter = end, g.routeAll(end)
		ph.note = fmt.Sprintf("%s killed; its node went after %.1fs; back on port %d, ready %.1fs after the kill",
			target.id, goneAt[i].Sub(ph.killAt).Seconds(), target.port, end.Sub(ph.killAt).Seconds())
		if err := d.waitRecovered(ctx, g, ph); err != nil {
			return err
		}
	}
	return d.flappedAll(ctx, phs, before)
}

// faultRolling stops one member (a follower), restarts every provider in
// turn (SIGTERM, a new process on a new port, on once its group's gateways
// route to it; the groups' i-th providers one after the other), and
// starts the member again once the gateways route to all.
func (d *driver) faultRolling(ctx context.Context, phs []*phase) error {
	before, err := d.registeredAll(ctx)
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
	stops := make([][]string, len(d.groups))
	for n := range nProviders {
		for i, g := range d.groups {
			p := g.providers[n]
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
			for !g.load.routedSince(map[string]time.Time{p.id: ready}) {
				if time.Now().After(deadline) {
					return fmt.Errorf("the gateways did not route to the restarted %s within %v", p.id, d.cfg.recoverLimit)
				}
				if err := drive.SleepCtx(ctx, 10*time.Millisecond); err != nil {
					return err
				}
			}
			logf("%s stopped in %.0fms, back on port %d, routed %.0fms after SIGTERM", p.id, ms(stopped), p.port, ms(time.Since(sig)))
			stops[i] = append(stops[i], fmt.Sprintf("%s %.0fms", p.id, ms(stopped)))
			phs[i].end = ready
		}
	}
	for i, g := range d.groups {
		phs[i].routeAfter = g.routeAll(phs[i].end)
		if err := d.waitRecovered(ctx, g, phs[i]); err != nil {
			return err
		}
	}
	if err := d.cluster.Restart(member); err != nil {
		return err
	}
	logf("member %d back after %.1fs", member.ID, time.Since(memberDown).Seconds())
	for i := range d.groups {
		phs[i].note = fmt.Sprintf("member %d down %.1fs; graceful stops: %v", member.ID, time.Since(memberDown).Seconds(), stops[i])
	}
	return d.flappedAll(ctx, phs, before)
}

// recoverReregistered ends a fault after which target registered again at
// again: every provider of g must be routed to after the fault's end
// (target after its new registration).
func (d *driver) recoverReregistered(ctx context.Context, g *group, ph *phase, target *instance, again time.Time, before map[string]int64) error {
	ph.routeAfter = g.routeAll(ph.end)
	ph.routeAfter[target.id] = again
	if err := d.waitRecovered(ctx, g, ph); err != nil {
		return err
	}
	after, err := d.allRegistered(ctx, g)
	ph.flapped = changed(g.providerIDs(), before, after)
	return err
}

// robustStepMore runs the robustness faults of this file (stale, lag,
// overlap); done is false for every other kind.
func (d *driver) robustStepMore(ctx context.Context, rs *robustState, st step, round int) (done bool, err error) {
	switch st.Kind {
	case kStale:
		return true, d.faultStale(ctx, rs, st, round)
	case kLag:
		return true, d.faultLag(ctx, st)
	case kOverlap:
		return true, d.faultOverlap(ctx, st)
	case kMinUp:
		return true, d.faultMinUp(ctx, rs, st)
	case kDrainExpire:
		return true, d.faultDrainExpire(ctx, rs, st)
	case kDrainSick:
		return true, d.faultDrainSick(ctx, rs, st, round)
	case kRestartDrain:
		return true, d.faultRestartDrain(ctx, rs, st, round) // ramp.go
	case kLostReply:
		return true, d.faultLostReply(ctx, rs, st, round) // lostreply.go
	}
	return false, nil
}

// faultDrainExpire drains a provider as an operator would (a
// version-checked write of sd.Drain's marker), expires the session that
// owns its node while the drain holds, waits until the provider registered
// again, holds the drain st.For more, and undrains. Its Registrar must
// re-create the node drained: the drain is the operator's, and only an
// undrain ends it (drain-held, after-drain).
func (d *driver) faultDrainExpire(ctx context.Context, rs *robustState, st step) error {
	g := d.groups[st.Group%len(d.groups)]
	p := g.providers[st.Slot%len(g.providers)]
	path := d.nodePaths(g)[p.id]
	sent := time.Now()
	if err := retry(ctx, func() error { return d.reader.drain(p.service, path, false) }); err != nil {
		return err
	}
	rs.wrote("drain", path, history.WantOut, sent)
	undrain := func() error {
		sent := time.Now()
		if err := retry(context.Background(), func() error { return d.reader.drain(p.service, path, true) }); err != nil {
			return err
		}
		rs.wrote("undrain", path, history.WantUp, sent)
		return nil
	}
	if err := drive.SleepCtx(ctx, 700*time.Millisecond); err != nil { // the Registrar has seen the drain
		return errors.Join(err, undrain())
	}
	var before int64
	err := retry(ctx, func() error {
		owner, err := d.reader.owner(path)
		if err != nil {
			return err
		}
		m, err := d.servingMember()
		if err != nil {
			return err
		}
		if _, stat, err := d.reader.conn.Exists(path); err == nil && stat != nil {
			before = stat.Czxid
		}
		return p.proxy.Expire(d.memberAddr(m), owner)
	})
	if err == nil {
		_, err = d.reRegistered(ctx, g, p, map[string]int64{p.id: before})
	}
	if err == nil {
		err = drive.SleepCtx(ctx, st.For)
	}
	return errors.Join(err, undrain())
}

// operatorDelay is each way's delay of the min-up operators' link to
// ZooKeeper: a guard's read and its write are 2×operatorDelay apart at
// the server at least, so operators that start together all count before
// any writes, and a guard that is not atomic with its write lets them all
// land.
const operatorDelay = 150 * time.Millisecond

// faultMinUp runs st.N operators at once, each gracekit drain -min-up
// (providers-1) of a provider of one group (the CLI binary, as an
// operator would; through a proxy of their own, a slow link). The
// operators whose drain landed hold it for st.For and undrain. The step
// is a history.Guard: at most one drain may land (min-up validator).
func (d *driver) faultMinUp(ctx context.Context, rs *robustState, st step) error {
	g := d.groups[st.Group%len(d.groups)]
	minUp := len(g.providers) - 1
	px, err := d.newProxy()
	if err != nil {
		return err
	}
	defer px.Close()
	px.SetDelay(operatorDelay)
	guard := history.Guard{Service: g.providers[0].service, MinUp: minUp, IDs: g.providerIDs(), From: time.Now()}
	type outcome struct {
		id, got string
		landed  bool
		err     error
	}
	res := make([]outcome, max(st.N, 1))
	var wg sync.WaitGroup
	for i := range res {
		p := g.providers[(st.Slot+i)%len(g.providers)]
		path := d.nodePaths(g)[p.id]
		res[i].id = p.id
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			code, out, err := d.operatorDrain(ctx, px, minUp, p.service, p.id)
			switch {
			case err != nil:
				res[i].got, res[i].err = "failed", fmt.Errorf("gracekit drain %s: %w: %s", p.id, err, out)
			case code == 0:
				res[i].got, res[i].landed = "drained", true
				rs.wrote("drain", path, history.WantOut, sent)
			case code == exitDrainRefused:
				res[i].got = "refused"
			default:
				// It may or may not have landed: undrain it anyway.
				res[i].got, res[i].landed = fmt.Sprintf("exit %d", code), true
				res[i].err = fmt.Errorf("gracekit drain %s: exit %d: %s", p.id, code, out)
			}
			if !res[i].landed {
				return
			}
			_ = drive.SleepCtx(ctx, st.For)
			err = retry(context.Background(), func() error {
				sent := time.Now()
				code, out, err := d.gracekit(context.Background(), px, "undrain", p.service, p.id)
				if err == nil && code != 0 {
					err = fmt.Errorf("exit %d: %s", code, out)
				}
				if err == nil {
					rs.wrote("undrain", path, history.WantUp, sent)
				}
				return err
			})
			if err != nil {
				res[i].err = errors.Join(res[i].err, fmt.Errorf("gracekit undrain %s: %w", p.id, err))
			}
		}()
	}
	wg.Wait()
	guard.To = time.Now()
	var what []string
	var errs []error
	for _, o := range res {
		what = append(what, o.id+" "+o.got)
		if o.err != nil {
			errs = append(errs, o.err)
		}
	}
	guard.What = fmt.Sprintf("%d operators, -min-up %d: %s", len(res), minUp, strings.Join(what, ", "))
	logf("min-up: %s", guard.What)
	rs.mu.Lock()
	rs.guards = append(rs.guards, guard)
	rs.mu.Unlock()
	return errors.Join(errs...)
}

// operatorDrain runs gracekit drain -min-up as an operator would: one
// that failed (not drained, not refused: the session lost under an
// ensemble fault, say) is run again, for at most checkRecovered. Running
// again a drain that landed is harmless: the node is drained already, and
// the drain keeps the status recorded first.
func (d *driver) operatorDrain(ctx context.Context, px *zkProxy, minUp int, service, id string) (int, string, error) {
	deadline := time.Now().Add(checkRecovered)
	for {
		code, out, err := d.gracekit(ctx, px, "drain", "-min-up", strconv.Itoa(minUp), service, id)
		if err == nil && (code == 0 || code == exitDrainRefused) || time.Now().After(deadline) || ctx.Err() != nil {
			return code, out, err
		}
		logf("min-up: gracekit drain %s: exit %d (%v): %s; again", id, code, err, out)
		if err := drive.SleepCtx(ctx, 200*time.Millisecond); err != nil {
			return code, out, err
		}
	}
}

// exitDrainRefused is gracekit drain's status when it refused (cmd/gracekit: exitRefused).
const exitDrainRefused = 3

// gracekit runs the gracekit CLI against the run's registry through px:
// its exit code and output. err is for a run that could not start or
// was killed.
func (d *driver) gracekit(ctx context.Context, px *zkProxy, args ...string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, checkRecovered)
	defer cancel()
	full := append([]string{args[0], "-zk", px.ConnectString(), "-base-path", d.basePath, "-timeout", robustTimeout.String()}, args[1:]...)
	cmd := exec.CommandContext(ctx, d.bins[cliName], full...)
	if d.sec != nil {
		cmd.Env = drive.ChildEnv(os.Environ(), d.sec.vars) // as an operator would set them
	}
	out, err := cmd.CombinedOutput()
	if err == nil {
		return 0, strings.TrimSpace(string(out)), nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return ee.ExitCode(), strings.TrimSpace(string(out)), nil
	}
	return -1, strings.TrimSpace(string(out)), err
}

// faultStale makes a server that serves from behind and sends consumers to
// it: a running member's data is copied, a registration is made, a
// standalone server starts from the copy (behind the registration every
// consumer read), and st.N consumers from st.Slot reach only it for
// st.For. A session that read the registration must be refused there (its
// lastZxidSeen is ahead of the copy's last zxid); one that resumes there
// publishes the set from before it (going-back).
func (d *driver) faultStale(ctx context.Context, rs *robustState, st step, round int) error {
	// The copy first, then a registration every consumer reads (its reply
	// carries a zxid past the copy's last): a server started from the copy
	// is behind every consumer. Not a deletion: a watch notification
	// carries no zxid, so a session that only heard of a deletion has not
	// seen its zxid, and no handshake can say it has.
	var cp *zktest.Cluster
	err := retry(ctx, func() error {
		src, err := d.servingMember()
		if err != nil {
			return err
		}
		cp, err = d.cluster.StaleCopy(filepath.Join(d.tmp, fmt.Sprintf("stale-r%d", round+1)), src)
		return err
	})
	if err != nil {
		return fmt.Errorf("copy a member's data: %w", err)
	}
	defer cp.Close()
	reg, err := rs.bursts.registrar(fmt.Sprintf("stale-r%d", round+1))
	if err != nil {
		return err
	}
	if err := d.register(ctx, rs, reg); err != nil {
		return err
	}
	if err := cp.StartAll(); err != nil { // a JVM's start: every consumer has read the registration by then
		return fmt.Errorf("start a server from the copy: %w", err)
	}
	var names []string
	var pxs []*zkProxy
	for i := range max(st.N, 1) {
		t := rs.targets[(st.Slot+i)%len(rs.targets)]
		names = append(names, t.name)
		pxs = append(pxs, t.proxy)
		t.proxy.Redirect(d.memberAddr(cp.Servers[0]))
	}
	logf("stale: %s reach only a server from a copy taken before %s was made", strings.Join(names, ", "), reg.Path())
	err = drive.SleepCtx(ctx, st.For)
	for _, px := range pxs {
		px.Redirect("")
	}
	return errors.Join(err, d.deregister(ctx, rs, reg))
}

// faultLag cuts member st.Slot (a follower if it was picked as the
// leader, the next member) off from the others' quorum links for st.For:
// its clients still reach it, and it answers them from behind until
// syncLimit passes and it gives up on the leader.
func (d *driver) faultLag(ctx context.Context, st step) error {
	m := d.cluster.Servers[st.Slot%len(d.cluster.Servers)]
	if l, err := d.cluster.Leader(); err == nil && l == m {
		m = d.cluster.Servers[(st.Slot+1)%len(d.cluster.Servers)]
	}
	if err := d.cluster.Isolate(m); err != nil {
		return err
	}
	err := drive.SleepCtx(ctx, st.For)
	d.cluster.Rejoin(m)
	if werr := d.cluster.WaitServing(checkRecovered); werr != nil {
		return werr
	}
	return err
}

// faultOverlap runs st.Ops on one provider: operator drains and undrains
// (version-checked writes of sd.Drain's marker, as gracekit drain does)
// and health flips (its health file), overlapping each other and the
// Registrar's own writes; it ends undrained and well.
func (d *driver) faultOverlap(ctx context.Context, st step) error {
	g := d.groups[st.Group%len(d.groups)]
	p := g.providers[st.Slot%len(g.providers)]
	path := d.nodePaths(g)[p.id]
	sick := p.vars["PROVIDER_HEALTH_FILE"]
	do := func(ctx context.Context, op string) error {
		switch op {
		case opDrain, opUndrain:
			undrain := op == opUndrain
			return retry(ctx, func() error { return d.reader.drain(p.service, path, undrain) })
		case opSick:
			return os.WriteFile(sick, nil, 0o644)
		case opWell:
			if err := os.Remove(sick); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		return nil
	}
	start := time.Now()
	var errs []error
	for _, o := range st.Ops {
		if err := drive.SleepCtx(ctx, time.Until(start.Add(o.At))); err != nil {
			return err
		}
		if err := do(ctx, o.Op); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o.Op, err))
		}
	}
	// The end: undrained and well, whatever the ops left.
	for _, op := range []string{opUndrain, opWell} {
		if err := do(context.Background(), op); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", op, err))
		}
	}
	return errors.Join(errs...)
}

// armFailpoints arms, in a provider's or gateway's environment, the
// failpoints seed draws (failpointSpec); a binary built without the
// gracekit_failpoints tag ignores them.
func armFailpoints(seed int64, cfg config, vars map[string]string) {
	if spec := failpointSpec(seed); spec != "" && !cfg.noFailpoints {
		vars[failpoint.EnvVar] = spec
	}
}
