package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/gracekit/gracekit/internal/failpoint"
)

// failpointNames are the points a schedule may arm.
var failpointNames = failpoint.Names

// The faults a robustness schedule draws from.
const (
	kBlackholeShort = "blackhole-short" // a consumer's connection drops every byte, shorter than its session timeout
	kBlackholeLong  = "blackhole-long"  // ... longer: its session expires
	kResetShort     = "reset-short"     // a consumer's connections are closed and refused
	kResetLong      = "reset-long"
	kLeader         = "leader"   // the ensemble's leader is killed, restarted after For
	kMember         = "member"   // a member is stopped, restarted after For
	kEnsemble       = "ensemble" // every member is stopped, started again after For
	kExpireProvider = "expire-provider"
	kExpireConsumer = "expire-consumer"
	kSigterm        = "sigterm" // a provider stops gracefully and starts again on a new port
	kKill           = "kill"    // kill -9, started again on a new port once its node went
	kHealth         = "health"  // a provider's health check fails for For
	kDrain          = "drain"   // an operator drains a provider (sd.Drain), undrains after For
	kFlips          = "flips"   // a registration's status flips N times, For apart
	kBurst          = "burst"   // N registrations come, and go after For
	// A member that serves from behind: a registration is made, a copy of
	// a member's data is taken, the registration goes, and N consumers
	// from Slot on reach only a server started from the copy for For
	// (shorter than their session timeout). A session that saw the
	// deletion must be refused there (lastZxidSeen ahead of its zxid).
	kStale = "stale"
	// A follower cut off from the leader (its quorum link blackholed) for
	// For, while clients still reach it: it answers reads from behind until
	// syncLimit passes (zktest.Cluster.Isolate).
	kLag = "lag"
	// Drains, undrains and health flips of one provider, overlapping (Ops).
	kOverlap = "overlap"
	// N operators drain N providers of one group at once, each with
	// gracekit drain -min-up <providers-1> (the CLI binary, through a slow
	// link), hold what landed for For, and undrain it: at most one may land.
	kMinUp = "minup"
	// An operator drains a provider (sd.Drain), its session is expired
	// while the drain holds, and the undrain comes For after it registered
	// again: the re-created node must carry the drain (drain-held).
	kDrainExpire = "drain-expire"
	// A provider's health check fails, an operator drains it once it is
	// unready, and the check passes again while the drain holds, For
	// more: the recovery must leave it unready (drain-held samples its
	// readiness). Drawn for the readyrace mutant only.
	kDrainSick = "drain-sick"
	// A provider stops gracefully and starts again; once it is ready,
	// the next provider of its group is drained for For and undrained:
	// set rebuilds while the restarted one ramps (ramp validator).
	kRestartDrain = "restart-drain"
	// The proxy of the driver's own client forwards a request of kind
	// Reply and drops its reply, while a registration under a service of
	// its own (so its parents are made) is registered, set OUT_OF_SERVICE
	// and deregistered, each with a bound: each must end within it
	// (bounded). For 0: the connection stays up, pings answered; else it
	// goes silent and is closed For later.
	kLostReply = "lostreply"
)

// lostReplyOps are the request kinds a lostreply step draws: every kind
// the Registrar sends (parents' exists and createContainer included).
var lostReplyOps = []string{"exists", "createContainer", "create", "getData", "setData", "delete"}

// The ops of an overlap step.
const (
	opDrain   = "drain"
	opUndrain = "undrain"
	opSick    = "sick"
	opWell    = "well"
)

// timedOp is one op of an overlap step, At after the step's start.
type timedOp struct {
	At time.Duration
	Op string
}

var allKinds = []string{kBlackholeShort, kBlackholeLong, kResetShort, kResetLong, kLeader, kMember, kEnsemble,
	kExpireProvider, kExpireConsumer, kSigterm, kKill, kHealth, kDrain, kFlips, kBurst, kStale, kLag, kOverlap, kMinUp, kDrainExpire, kRestartDrain, kLostReply}

// step is one fault of a round.
type step struct {
	Kind  string
	At    time.Duration // after the round's start: faults overlap
	For   time.Duration // how long it holds; 0: at once
	Group int           // the provider group (provider faults)
	Slot  int           // provider slot, consumer index or member index; for expire-provider, nProviders is the bursts' client
	N     int           // burst size, flips; for stale, how many consumers from Slot
	Ops   []timedOp     // overlap: its drains, undrains and health flips, in order
	Reply string        // lostreply: the request kind whose reply is lost (zkOps)
}

// round is faults that overlap; the round heals when every one ended.
type round struct {
	Steps []step
	Pause time.Duration // quiet load after the heal, before the next round
}

// schedule is what a seed draws: the same seed, the same schedule.
type schedule struct {
	Seed   int64
	Rounds []round
	// Failpoints is what the seed arms inside the providers and gateways
	// (GRACEKIT_FAILPOINTS; failpointSpec); "" for none.
	Failpoints string
	// Bias is the planted bug the schedule is drawn to exercise
	// (mutation mode); "" for an ordinary schedule.
	Bias string
	// Restore is how the ensemble is restored after the last round
	// (restore.go): restoreEmpty, restoreSnapshot, or "" for no restore.
	Restore string
}

// scheduleShape is what a schedule may target.
type scheduleShape struct {
	rounds, consumers, groups, providers, members int
	sessionTimeout                                time.Duration
	bias                                          string // a mutant's name: its rounds are the faults that exercise it (mutants.go)
}

func (s schedule) faults() int {
	n := 0
	for _, r := range s.Rounds {
		n += len(r.Steps)
	}
	return n
}

// newSchedule draws a schedule from seed (math/rand/v2's PCG). Each round
// has 1 to 3 faults starting within 1.5 s of each other; at most one
// fault of the ensemble, one per provider group, one per consumer, one
// burst and one flip series per round, so that every group keeps a
// provider in rotation.
func newSchedule(seed int64, sh scheduleShape) schedule {
	r := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+r.IntN(hi-lo+1)) * time.Millisecond }
	s := schedule{Seed: seed, Failpoints: failpointSpec(seed), Bias: sh.bias, Restore: restoreSpec(seed)}
	if sh.bias != "" {
		s.Restore = biasRestore(sh.bias) // mutants.go
	}
	for range sh.rounds {
		var rd round
		if sh.bias != "" {
			rd.Steps = biasSteps(sh.bias, r, sh)
			rd.Pause = ms(1000, 2000)
			s.Rounds = append(s.Rounds, rd)
			continue
		}
		used := map[string]bool{}
		want := 1 + r.IntN(3)
		for try := 0; len(rd.Steps) < want && try < 50; try++ {
			st := step{Kind: allKinds[r.IntN(len(allKinds))], At: ms(0, 1500)}
			var slot string
			switch st.Kind {
			case kBlackholeShort, kResetShort:
				st.Slot, st.For = r.IntN(sh.consumers), ms(500, 3000)
				slot = fmt.Sprint("consumer", st.Slot)
			case kBlackholeLong, kResetLong:
				st.Slot, st.For = r.IntN(sh.consumers), sh.sessionTimeout+ms(1000, 4000)
				slot = fmt.Sprint("consumer", st.Slot)
			case kExpireConsumer:
				st.Slot = r.IntN(sh.consumers)
				slot = fmt.Sprint("consumer", st.Slot)
			case kLeader, kMember, kEnsemble:
				st.Slot, st.For = r.IntN(sh.members), ms(1000, 4000)
				if st.Kind == kEnsemble {
					st.For = ms(2000, 6000)
				}
				slot = "ensemble"
			case kExpireProvider:
				st.Group, st.Slot = r.IntN(sh.groups), r.IntN(sh.providers+1)
				slot = fmt.Sprint("group", st.Group)
				if st.Slot == sh.providers {
					slot = "bursts"
				}
			case kSigterm, kKill:
				st.Group, st.Slot = r.IntN(sh.groups), r.IntN(sh.providers)
				slot = fmt.Sprint("group", st.Group)
			case kHealth, kDrain, kDrainExpire, kRestartDrain:
				st.Group, st.Slot, st.For = r.IntN(sh.groups), r.IntN(sh.providers), ms(2000, 5000)
				slot = fmt.Sprint("group", st.Group)
			case kOverlap:
				st.Group, st.Slot = r.IntN(sh.groups), r.IntN(sh.providers)
				st.Ops, st.For = overlapOps(r), 0
				slot = fmt.Sprint("group", st.Group)
			case kMinUp:
				st.Group, st.Slot, st.N, st.For = r.IntN(sh.groups), r.IntN(sh.providers), minUpOperators(r, sh), ms(1500, 3000)
				slot = fmt.Sprint("group", st.Group)
			case kStale:
				// A consumer that reads through its own proxy: the stale
				// server is not an ensemble member, so no provider's or
				// gateway's writes may reach it.
				st.Slot, st.N, st.For = r.IntN(sh.consumers), 1, ms(1500, 2500)
				slot = "ensemble"
			case kLag:
				st.Slot, st.For = r.IntN(sh.members), ms(1000, 4000)
				slot = "ensemble"
			case kFlips:
				st.Slot, st.N, st.For = r.IntN(2), 2+r.IntN(4), ms(300, 800)
				slot = "flips"
			case kBurst:
				st.N, st.For = 5+r.IntN(16), ms(1000, 3000)
				slot = "bursts"
			case kLostReply:
				st.Reply = lostReplyOps[r.IntN(len(lostReplyOps))]
				if r.IntN(2) == 0 {
					st.For = sh.sessionTimeout // silent, and closed after a session timeout
				}
				slot = "bursts"
			}
			if used[slot] {
				continue
			}
			used[slot] = true
			rd.Steps = append(rd.Steps, st)
		}
		rd.Pause = ms(1000, 2000)
		s.Rounds = append(s.Rounds, rd)
	}
	return s
}

// String is the schedule on one line: rounds apart with "|".
func (s schedule) String() string {
	var rs []string
	for _, rd := range s.Rounds {
		var ss []string
		for _, st := range rd.Steps {
			ss = append(ss, st.String())
		}
		rs = append(rs, strings.Join(ss, " "))
	}
	out := strings.Join(rs, " | ")
	if s.Failpoints != "" {
		out += " || failpoints " + s.Failpoints
	}
	if s.Restore != "" {
		out += " || restore " + s.Restore
	}
	if s.Bias != "" {
		out += " || mutant " + s.Bias
	}
	return out
}

// overlapOps draws 4 to 8 drains, undrains and health flips of one
// instance within 4 s, each at most 700 ms after the one before, so that
// they overlap the writes and re-reads the others cause. The instance ends
// undrained and well (the step adds both at its end).
func overlapOps(r *rand.Rand) []timedOp {
	kinds := []string{opDrain, opUndrain, opSick, opWell}
	var ops []timedOp
	at := time.Duration(0)
	for range 4 + r.IntN(5) {
		at += time.Duration(50+r.IntN(650)) * time.Millisecond
		ops = append(ops, timedOp{At: at, Op: kinds[r.IntN(len(kinds))]})
	}
	return ops
}

// minUpOperators is how many operators a min-up step has: 2, or every
// provider of the group.
func minUpOperators(r *rand.Rand, sh scheduleShape) int {
	return 2 + r.IntN(max(sh.providers-1, 1))
}

// failpointSpec is what seed arms inside the providers and gateways
// (internal/failpoint, built with the gracekit_failpoints tag): each point
// with probability 1/2, at 10 to 50% of its passes, for 50 to 800 ms. It
// has a random stream of its own, so that the schedule's faults do not
// depend on it.
func failpointSpec(seed int64) string {
	r := rand.New(rand.NewPCG(uint64(seed), 0x243f6a8885a308d3))
	var parts []string
	for _, name := range failpointNames {
		if r.IntN(2) == 0 {
			continue
		}
		pct := []int{10, 25, 50}[r.IntN(3)]
		parts = append(parts, fmt.Sprintf("%s=%d%%sleep(%dms)", name, pct, 50+r.IntN(751)))
	}
	return strings.Join(parts, ";")
}

func (st step) String() string {
	var b strings.Builder
	b.WriteString(st.Kind)
	switch st.Kind {
	case kBlackholeShort, kBlackholeLong, kResetShort, kResetLong, kExpireConsumer:
		fmt.Fprintf(&b, "(consumer %d)", st.Slot)
	case kLeader, kEnsemble:
	case kMember, kLag:
		fmt.Fprintf(&b, "(member %d)", st.Slot+1)
	case kFlips:
		fmt.Fprintf(&b, "(steady %d ×%d)", st.Slot+1, st.N)
	case kBurst:
		fmt.Fprintf(&b, "(×%d)", st.N)
	case kStale:
		fmt.Fprintf(&b, "(consumer %d ×%d)", st.Slot, st.N)
	case kMinUp:
		fmt.Fprintf(&b, "(group %d ×%d from slot %d)", st.Group, st.N, st.Slot+1)
	case kLostReply:
		mode := "kept"
		if st.For > 0 {
			mode = "silent"
		}
		fmt.Fprintf(&b, "(%s %s)", st.Reply, mode)
	case kOverlap:
		var ops []string
		for _, o := range st.Ops {
			ops = append(ops, fmt.Sprintf("%s@%.1f", o.Op, o.At.Seconds()))
		}
		fmt.Fprintf(&b, "(group %d slot %d: %s)", st.Group, st.Slot+1, strings.Join(ops, ","))
	default:
		fmt.Fprintf(&b, "(group %d slot %d)", st.Group, st.Slot+1)
	}
	fmt.Fprintf(&b, "@%.1fs", st.At.Seconds())
	if st.For > 0 {
		fmt.Fprintf(&b, "/%.1fs", st.For.Seconds())
	}
	return b.String()
}
