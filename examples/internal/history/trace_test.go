package history

import (
	"slices"
	"testing"
	"time"
)

func req(ms int, gw, instance string) Request {
	return Request{At: at(ms), Done: at(ms + 5), Gateway: gw, Instance: instance}
}

// traced is a history whose requests name their instances: a and b run
// all along; c runs from 500 and is stopped by SIGTERM at 1400 (out at
// 1500, deleted at 1600), and gw-1 and gw-2 ack its flush at 1700.
func traced() *History {
	return &History{
		Seed: 9, Start: at(-1000), End: at(20000), SessionTimeout: 4 * time.Second,
		Truth: []Change{
			change(0, Created, pathA, 10, "a:1", true),
			change(0, Created, pathB, 11, "b:1", true),
			change(500, Created, pathC, 12, "c:1", true),
			change(1500, Changed, pathC, 12, "c:1", false),
			change(1600, Deleted, pathC, 12, "c:1", false),
		},
		Runs: []Run{
			{Service: svc, ID: "a", Path: pathA, Start: at(0)},
			{Service: svc, ID: "b", Path: pathB, Start: at(0)},
			{Service: svc, ID: "c", Path: pathC, Start: at(500), Stopping: at(1400), How: "sigterm"},
		},
		Stops: []Stop{{Service: svc, ID: "c", Signal: at(1400), Out: at(1500), Deregistered: at(1600), Acks: []Ack{
			{Gateway: "gw-1", Target: "http://127.0.0.1:1/flush", Acked: true, At: at(1700)},
			{Gateway: "gw-2", Target: "http://127.0.0.1:2/flush", Acked: true, At: at(1700)},
		}}},
		Requests: []Request{
			req(100, "gw-1", "a"), req(200, "gw-2", "b"),
			req(600, "gw-1", "c"), req(700, "gw-2", "c"),
			req(1450, "gw-1", "c"), // after the SIGTERM, before the ack: allowed
			req(1800, "gw-2", "c"), // after the ack, within Skew: allowed
			req(3000, "gw-1", "a"), req(3000, "gw-2", "b"),
			req(9000, "gw-1", "a"), req(9000, "gw-2", "b"),
		},
	}
}

var traceBounds = Bounds{Converge: 2 * time.Second, Reregister: time.Second, Skew: time.Second, Leave: time.Second, Starve: 5 * time.Second}

func TestTracedHistoryPassesTheTraceValidators(t *testing.T) {
	h := traced()
	tr := NewTruth(h)
	for _, r := range []Report{FlushAck(h, traceBounds), AfterLeave(h, tr, traceBounds), FlushReach(h), Starved(h, traceBounds)} {
		if len(r.Violations) > 0 || r.Checks == 0 {
			t.Errorf("checks %d, violations %v", r.Checks, r.Violations)
		}
	}
	rep := Check(h, traceBounds)
	for _, name := range []string{CheckFlushAck, CheckAfterLeave, CheckFlushReach, CheckStarved} {
		if rep.ByCheck[name] == 0 {
			t.Errorf("Check made no %s assertion", name)
		}
	}
	if rep.Leave != time.Second || rep.Stops != 1 || rep.Traced != len(h.Requests) {
		t.Errorf("report leave %v stops %d traced %d", rep.Leave, rep.Stops, rep.Traced)
	}
}

func TestTraceValidatorsCatchDoctoredHistories(t *testing.T) {
	tests := []struct {
		name   string
		doctor func(h *History)
		check  func(h *History) Report
		want   string
	}{
		{
			name:   "a request through a gateway after it acked the flush is flush-ack",
			doctor: func(h *History) { h.Requests = append(h.Requests, req(2800, "gw-1", "c")) },
			check:  func(h *History) Report { return FlushAck(h, traceBounds) },
			want:   CheckFlushAck,
		},
		{
			name:   "a request to a deregistered instance past the bound is after-leave",
			doctor: func(h *History) { h.Requests = append(h.Requests, req(2700, "gw-3", "c")) },
			check:  func(h *History) Report { return AfterLeave(h, NewTruth(h), traceBounds) },
			want:   CheckAfterLeave,
		},
		{
			name: "a request to a drained instance past the bound is after-leave",
			doctor: func(h *History) {
				h.Truth = append(h.Truth, change(4000, Changed, pathA, 10, "a:1", false))
				h.Requests = append(h.Requests, req(5500, "gw-1", "a"))
			},
			check: func(h *History) Report { return AfterLeave(h, NewTruth(h), traceBounds) },
			want:  CheckAfterLeave,
		},
		{
			name:   "a stop whose flush reached no gateway is flush-reach",
			doctor: func(h *History) { h.Stops[0].Acks = nil },
			check:  func(h *History) Report { return FlushReach(h) },
			want:   CheckFlushReach,
		},
		{
			name: "a gateway that routed to the instance and did not ack is flush-reach",
			doctor: func(h *History) {
				h.Stops[0].Acks[1].Acked = false
			},
			check: func(h *History) Report { return FlushReach(h) },
			want:  CheckFlushReach,
		},
		{
			name: "a run that gets no call is starved",
			doctor: func(h *History) {
				h.Requests = slices.DeleteFunc(h.Requests, func(q Request) bool { return q.Instance == "b" })
				h.Requests = append(h.Requests, req(9500, "gw-2", "b")) // served, but too late
			},
			check: func(h *History) Report { return Starved(h, traceBounds) },
			want:  CheckStarved,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := traced()
			tt.doctor(h)
			r := tt.check(h)
			if got := checks(r.Violations); len(got) == 0 || !slices.Contains(got, tt.want) {
				t.Fatalf("violations %v, want %s", r.Violations, tt.want)
			}
			if all := checks(Check(h, traceBounds).Violations); !slices.Contains(all, tt.want) {
				t.Errorf("Check's violations %v lack %s", all, tt.want)
			}
		})
	}
}

func TestAfterLeaveDoesNotChargeAGatewayKeptFromZooKeeper(t *testing.T) {
	h := traced()
	h.Requests = append(h.Requests, req(2700, "gw-3", "c"))
	h.Blinds = []Blind{{Target: "gw-3", From: at(1000), To: at(2600), What: "partition"}}
	if r := AfterLeave(h, NewTruth(h), traceBounds); len(r.Violations) > 0 || r.Unverified == 0 {
		t.Fatalf("violations %v, unverified %d", r.Violations, r.Unverified)
	}
}

// The case of issue 30 (seed 6201291985197580982): a consumer publishes b
// out of service at 560, inside the truth recorder's gap (437 to 826);
// the recorder reads the change only at 1725. Timed by when the recorder
// saw it, the consumer looks as if it went back to ZooKeeper's set of 36 s
// before; timed by the change's mtime (550), it is simply ahead.
func TestAConsumerAheadOfTheRecorderIsNotChargedWhenTheTruthIsTimedByMtime(t *testing.T) {
	hist := func(changedAt int) *History {
		return &History{
			Seed: 6201291985197580982, Start: at(-40000), End: at(20000), SessionTimeout: 4 * time.Second,
			Truth: []Change{
				change(-40000, Created, pathA, 10, "a:1", true),
				change(-36000, Created, pathB, 11, "b:1", true),
				change(changedAt, Changed, pathB, 11, "b:1", false),
			},
			Gaps:      []Gap{{From: at(437), To: at(826)}},
			Publishes: []Publish{pub(-30000, "catalog", m("a:1", 0), m("b:1", 0)), pub(560, "catalog", m("a:1", 0))},
		}
	}
	recorded := hist(1725) // when the recorder saw it: the old timing
	// Without its gap: GoingBack now leaves a set published while the
	// recorder was blind unverified, which alone spares this consumer.
	recorded.Gaps = nil
	if r := GoingBack(recorded, NewTruth(recorded), DefaultBounds); len(r.Violations) == 0 {
		t.Fatalf("timed by the recorder, the consumer is not charged: the replay does not reproduce the case")
	}
	stamped := hist(550) // the node's mtime
	if r := Check(stamped, DefaultBounds); len(r.Violations) > 0 {
		t.Fatalf("timed by mtime, the consumer ahead of the recorder is charged: %v", r.Violations)
	}
}

func TestAgreeCatchesConsumersThatEndARoundApart(t *testing.T) {
	h := &History{
		Start: at(0), End: at(20000), SessionTimeout: 4 * time.Second,
		Truth: []Change{change(0, Created, pathA, 10, "a:1", true), change(0, Created, pathB, 11, "b:1", true)},
		Heals: []Heal{{At: at(1000), What: "partition"}},
		Publishes: []Publish{
			pub(100, "instancer", m("a:1", 0), m("b:1", 0)),
			pub(100, "catalog", m("a:1", 0), m("b:1", 0)),
		},
	}
	if r := Agree(h, traceBounds); len(r.Violations) > 0 || r.Checks == 0 {
		t.Fatalf("consumers on one set: checks %d, violations %v", r.Checks, r.Violations)
	}
	h.Publishes = append(h.Publishes, pub(900, "catalog", m("a:1", 0)), pub(1500, "instancer", m("b:1", 0)))
	if got := checks(Agree(h, traceBounds).Violations); !slices.Contains(got, CheckAgree) {
		t.Fatalf("consumers apart at the round's end: violations %v, want %s", got, CheckAgree)
	}
}

func TestChangeLatencyMeasuresEveryChange(t *testing.T) {
	h := &History{
		Start: at(0), End: at(20000), SessionTimeout: 4 * time.Second,
		Truth: []Change{
			change(0, Created, pathA, 10, "a:1", true),
			change(1000, Created, pathB, 11, "b:1", true),
			change(5000, Deleted, pathB, 11, "b:1", false),
		},
		Publishes: []Publish{
			pub(10, "instancer", m("a:1", 0)),
			pub(1040, "instancer", m("a:1", 0), m("b:1", 0)),
			pub(5300, "instancer", m("a:1", 0)),
		},
	}
	l := ChangeLatency(h, NewTruth(h), traceBounds)
	if l.N != 2 || l.Max != 300*time.Millisecond {
		t.Fatalf("latency %v, want n=2 max=300ms", l)
	}
}

func TestWriteAckCatchesAWriteTheRegistryNeverHeld(t *testing.T) {
	h := traced()
	h.Writes = []Written{
		{Op: "register", Path: pathC, Want: WantUp, Sent: at(400), Acked: at(510)},
		{Op: "set-status", Path: pathC, Want: WantOut, Sent: at(1450), Acked: at(1510)},
		{Op: "deregister", Path: pathC, Want: WantAbsent, Sent: at(1550), Acked: at(1610)},
	}
	if r := WriteAck(h, NewTruth(h), traceBounds); len(r.Violations) > 0 || r.Checks != 3 {
		t.Fatalf("writes the truth holds: checks %d, violations %v", r.Checks, r.Violations)
	}
	h.Writes = append(h.Writes, Written{Op: "drain", Path: pathA, Want: WantOut, Sent: at(6000), Acked: at(6010)})
	if got := checks(WriteAck(h, NewTruth(h), traceBounds).Violations); !slices.Contains(got, CheckWriteAck) {
		t.Fatalf("a drain ZooKeeper never showed: violations %v, want %s", got, CheckWriteAck)
	}
}

// Seed 7087582546183187199: c, drained and undrained (UP again at 4211),
// loses its node to its session's expiry; the consumer publishes {a,b} at
// 23101, a new registration d is created at 23110 (its ctime), and the
// recorder sees c's deletion only at 23141. A deletion has no time of its
// own, so the consumer, ahead of the recorder, matched only ZooKeeper's
// {a,b} from before the undrain and was charged with going back. A set
// that drops a deletion the recorder saw later, within the skew, is as new
// as the set it drops it from; one that drops it earlier still went back.
func TestAConsumerThatSawADeletionBeforeTheRecorderIsNotCharged(t *testing.T) {
	hist := func(publishedAt int) *History {
		return &History{
			Start: at(-20000), End: at(40000), SessionTimeout: 4 * time.Second,
			Truth: []Change{
				change(-20000, Created, pathA, 10, "a:1", true),
				change(-19500, Created, pathB, 11, "b:1", true),
				change(-19000, Created, pathC, 12, "c:1", true),
				change(-2000, Changed, pathC, 12, "c:1", false),
				change(4211, Changed, pathC, 12, "c:1", true),
				change(23110, Created, pathC+"-new", 30, "d:1", true),
				change(23141, Deleted, pathC, 12, "c:1", false),
			},
			Publishes: []Publish{
				pub(-18900, "instancer", m("a:1", 0), m("b:1", 0), m("c:1", 0)),
				pub(-1000, "instancer", m("a:1", 0), m("b:1", 0)),
				pub(4235, "instancer", m("a:1", 0), m("b:1", 0), m("c:1", 0)),
				pub(publishedAt, "instancer", m("a:1", 0), m("b:1", 0)),
				pub(23136, "instancer", m("a:1", 0), m("b:1", 0), m("d:1", 0)),
			},
		}
	}
	ahead := hist(23101)
	if r := GoingBack(ahead, NewTruth(ahead), DefaultBounds); len(r.Violations) > 0 {
		t.Fatalf("a consumer that saw a deletion 40ms before the recorder is charged: %v", r.Violations)
	}
	behind := hist(15000) // 8 s before the recorder saw c go: far past the skew
	if got := checks(GoingBack(behind, NewTruth(behind), DefaultBounds).Violations); !slices.Contains(got, CheckGoingBack) {
		t.Fatalf("a consumer that dropped c 8s before its deletion is not charged: %v", got)
	}
}

// Seed 1258117544156544413: the recorder was blind from 2546 to 4549 (a
// lag fault on its member); the burst client's session expired at about
// 2800, so its two nodes went then, and the recorder saw them gone only
// at 4596, its first read after the gap. A consumer that published the
// empty set at 2857 was ahead of the recorder, not behind ZooKeeper. The
// same set published before the gap began still went back.
func TestADeletionSeenJustAfterAGapMayHaveHappenedInIt(t *testing.T) {
	hist := func(publishedAt int) *History {
		return &History{
			Start: at(-3000), End: at(10000), SessionTimeout: 4 * time.Second,
			Truth: []Change{
				change(-2436, Created, pathA, 51, "a:1", true),
				change(-2436, Created, pathB, 54, "b:1", true),
				change(4596, Deleted, pathA, 51, "a:1", false),
				change(4596, Deleted, pathB, 54, "b:1", false),
			},
			Gaps: []Gap{{From: at(2546), To: at(4549)}},
			Publishes: []Publish{
				pub(-3000, "resolver"),
				pub(-2430, "resolver", m("a:1", 0), m("b:1", 0)),
				pub(publishedAt, "resolver"),
			},
		}
	}
	inGap := hist(2857)
	if r := GoingBack(inGap, NewTruth(inGap), DefaultBounds); len(r.Violations) > 0 {
		t.Fatalf("a consumer that saw a deletion while the recorder was blind is charged: %v", r.Violations)
	}
	before := hist(1000) // before the gap began: ZooKeeper still held both
	only(t, GoingBack(before, NewTruth(before), DefaultBounds), CheckGoingBack, "resolver")
}
