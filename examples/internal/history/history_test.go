package history

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

const (
	svc   = "quote"
	pathA = "/s/quote/a"
	pathB = "/s/quote/b"
	pathC = "/s/quote/c"
)

func change(ms int, k Kind, path string, czxid int64, addr string, up bool) Change {
	return Change{At: at(ms), Kind: k, Key: Key{Path: path, Czxid: czxid}, Service: svc, ID: path[len(path)-1:], Addr: addr, Up: up}
}

func pub(ms int, consumer string, members ...Member) Publish {
	return Publish{At: at(ms), Consumer: consumer, Service: svc, Members: members}
}

func m(addr string, czxid int64) Member { return Member{Addr: addr, Czxid: czxid} }

// clean is a history with nothing wrong in it: a and b registered; b's
// session expires and b registers again; c registers and stops; a is
// drained; two heals; the load has one failure, the crash's.
func clean() *History {
	return &History{
		Seed: 7, Start: at(-1000), End: at(20000), SessionTimeout: 4 * time.Second,
		Truth: []Change{
			change(0, Created, pathA, 10, "a:1", true),
			change(0, Created, pathB, 11, "b:1", true),
			change(500, Created, pathC, 12, "c:1", true),
			change(1500, Changed, pathC, 12, "c:1", false),
			change(1600, Deleted, pathC, 12, "c:1", false),
			change(2000, Deleted, pathB, 11, "b:1", false),
			change(3000, Created, pathB, 20, "b:1", true),
			change(4000, Changed, pathA, 10, "a:1", false),
		},
		Publishes: []Publish{
			pub(100, "instancer", m("a:1", 0), m("b:1", 0)),
			pub(600, "instancer", m("a:1", 0), m("b:1", 0), m("c:1", 0)),
			pub(1550, "instancer", m("a:1", 0), m("b:1", 0)),
			pub(2100, "instancer", m("a:1", 0)),
			{At: at(2500), Consumer: "instancer", Service: svc, Members: []Member{m("a:1", 0)}, Err: "sd: disconnected"},
			pub(3100, "instancer", m("a:1", 0), m("b:1", 0)),
			pub(4100, "instancer", m("b:1", 0)),
			pub(150, "resolver", m("a:1", 10), m("b:1", 11)),
			pub(2050, "resolver", m("a:1", 10)),
			pub(3050, "resolver", m("a:1", 10), m("b:1", 20)),
			pub(4050, "resolver", m("b:1", 20)),
		},
		Heals: []Heal{{At: at(1000), What: "leader"}, {At: at(5000), What: "session b"}},
		Runs: []Run{
			{Service: svc, ID: "a", Path: pathA, Start: at(-1000)},
			{Service: svc, ID: "b", Path: pathB, Start: at(-1000)},
			{Service: svc, ID: "c", Path: pathC, Start: at(400), Stopping: at(1400), How: "sigterm"},
		},
		Requests: []Request{
			{At: at(100), Done: at(150), Gateway: "gw-1", Post: true, Key: "k1"},
			{At: at(200), Done: at(250), Gateway: "gw-1"},
			{At: at(1380), Done: at(1420), Gateway: "gw-2", Post: true, Key: "k2", Failed: true, Reason: "HTTP 502: attempt 1 on c:1: EOF"},
		},
		Crashes:    []Crash{{Addr: "c:1", KillAt: at(1400), DeadAt: at(1410)}},
		Executions: map[string]int{"k1": 1},
	}
}

func checks(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Check)
	}
	return out
}

func TestACleanHistoryPassesEveryValidator(t *testing.T) {
	h := clean()
	r := Check(h, DefaultBounds)
	if len(r.Violations) != 0 {
		var b bytes.Buffer
		WriteReport(&b, h, r)
		t.Fatalf("violations in a clean history:\n%s", b.String())
	}
	if r.Checks < len(h.Requests)+len(h.Heals)*2 {
		t.Errorf("Checks = %d: the validators checked less than the history holds", r.Checks)
	}
	if r.Requests != 3 || r.Failed != 0 || r.Duplicated != 0 {
		t.Errorf("requests=%d failed=%d duplicated=%d, want 3, 0, 0", r.Requests, r.Failed, r.Duplicated)
	}
}

// only runs one validator over a doctored history and wants exactly one
// violation, of check want, naming consumer.
func only(t *testing.T, r Report, want, consumer string) Violation {
	t.Helper()
	if len(r.Violations) != 1 || r.Violations[0].Check != want {
		t.Fatalf("violations %v (%+v), want one %s", checks(r.Violations), r.Violations, want)
	}
	v := r.Violations[0]
	if v.Consumer != consumer {
		t.Errorf("violation names consumer %q, want %q", v.Consumer, consumer)
	}
	if v.What == "" || v.At.IsZero() {
		t.Errorf("violation %+v does not say what broke or when", v)
	}
	return v
}

func TestAResurrectionIsFlagged(t *testing.T) {
	t.Run("a stopped instance published again, by address", func(t *testing.T) {
		h := clean()
		h.Publishes = append(h.Publishes, pub(14000, "instancer", m("b:1", 0), m("c:1", 0)))
		v := only(t, PhantomsAndResurrections(h, NewTruth(h), DefaultBounds), CheckResurrection, "instancer")
		if !strings.Contains(v.What, pathC) {
			t.Errorf("%q does not name the deleted registration %s", v.What, pathC)
		}
	})
	t.Run("an expired registration published again by czxid, though its id lives on", func(t *testing.T) {
		h := clean()
		h.Publishes = append(h.Publishes, pub(14000, "resolver", m("b:1", 11)))
		only(t, PhantomsAndResurrections(h, NewTruth(h), DefaultBounds), CheckResurrection, "resolver")
	})
}

func TestAPhantomIsFlagged(t *testing.T) {
	t.Run("an instance ZooKeeper never held", func(t *testing.T) {
		h := clean()
		h.Publishes = append(h.Publishes, pub(6000, "instancer", m("b:1", 0), m("z:9", 0)))
		only(t, PhantomsAndResurrections(h, NewTruth(h), DefaultBounds), CheckPhantom, "instancer")
	})
	t.Run("an instance out of service for longer than the bound", func(t *testing.T) {
		h := clean()
		h.Publishes = append(h.Publishes, pub(16000, "instancer", m("a:1", 0), m("b:1", 0)))
		v := only(t, PhantomsAndResurrections(h, NewTruth(h), DefaultBounds), CheckPhantom, "instancer")
		if !strings.Contains(v.What, "out of service") {
			t.Errorf("%q does not say it was out of service", v.What)
		}
	})
	t.Run("not when the set is the last good one, published with its error", func(t *testing.T) {
		h := clean()
		h.Publishes = append(h.Publishes, Publish{At: at(16000), Consumer: "instancer", Service: svc, Members: []Member{m("z:9", 0)}, Err: "sd: disconnected"})
		if r := PhantomsAndResurrections(h, NewTruth(h), DefaultBounds); len(r.Violations) != 0 {
			t.Errorf("violations %+v for a set published with an error", r.Violations)
		}
	})
	t.Run("not when the truth recorder was blind then", func(t *testing.T) {
		h := clean()
		h.Publishes = append(h.Publishes, pub(6000, "instancer", m("b:1", 0), m("z:9", 0)))
		h.Gaps = []Gap{{From: at(5500), To: at(5900)}}
		r := PhantomsAndResurrections(h, NewTruth(h), DefaultBounds)
		if len(r.Violations) != 0 || r.Unverified != 1 {
			t.Errorf("violations %+v, unverified %d; want none and 1", r.Violations, r.Unverified)
		}
	})
}

func TestAStaleSetIsFlaggedAsGoingBack(t *testing.T) {
	h := clean()
	// After {b} (a drained at 4 s), the consumer publishes {a,b} again:
	// ZooKeeper's set from before the drain.
	h.Publishes = append(h.Publishes, pub(6000, "instancer", m("a:1", 0), m("b:1", 0)))
	v := only(t, GoingBack(h, NewTruth(h), DefaultBounds), CheckGoingBack, "instancer")
	if !strings.Contains(v.What, "{a:1,b:1}") {
		t.Errorf("%q does not name the stale set", v.What)
	}
}

// Seed 5810577760562063218: a drain undone 12 ms later while the truth
// recorder was blind; it read the node only undone, the consumers
// published both sets. The set of the drain is no older than the one
// before: unverified, not going back.
func TestASetPublishedWhileTheTruthWasBlindIsNotGoingBack(t *testing.T) {
	h := clean()
	h.Truth = append(h.Truth, change(5500, Changed, pathA, 10, "a:1", true))
	h.Publishes = append(h.Publishes, pub(5600, "instancer", m("a:1", 0), m("b:1", 0)),
		pub(6100, "instancer", m("b:1", 0)), pub(6150, "instancer", m("a:1", 0), m("b:1", 0)))
	if only(t, GoingBack(h, NewTruth(h), DefaultBounds), CheckGoingBack, "instancer"); t.Failed() {
		return
	}
	h.Gaps = []Gap{{From: at(6000), To: at(6200)}}
	r := GoingBack(h, NewTruth(h), DefaultBounds)
	if len(r.Violations) != 0 || r.Unverified < 1 {
		t.Errorf("violations %+v, unverified %d; want none and at least 1", r.Violations, r.Unverified)
	}
}

func TestAConsumerThatPublishesTheSameSetAgainDoesNotGoBack(t *testing.T) {
	h := clean()
	// a is undrained: {a,b} is ZooKeeper's set again, newer than {b}.
	h.Truth = append(h.Truth, change(5500, Changed, pathA, 10, "a:1", true))
	h.Publishes = append(h.Publishes, pub(6000, "instancer", m("a:1", 0), m("b:1", 0)))
	if r := GoingBack(h, NewTruth(h), DefaultBounds); len(r.Violations) != 0 {
		t.Errorf("violations %+v", r.Violations)
	}
}

func TestALostReregistrationIsFlagged(t *testing.T) {
	h := clean()
	var kept []Change
	for _, c := range h.Truth {
		if c.Kind != Created || c.Key.Czxid != 20 {
			kept = append(kept, c)
		}
	}
	h.Truth = kept
	v := only(t, Reregistration(h, NewTruth(h), DefaultBounds), CheckReregistration, "")
	if !strings.Contains(v.What, pathB) {
		t.Errorf("%q does not name %s", v.What, pathB)
	}
	if want := at(2000).Add(h.SessionTimeout + DefaultBounds.Reregister); !v.At.Equal(want) {
		t.Errorf("violation at %v, want the deadline %v", v.At, want)
	}
}

func TestAReregistrationAfterAPartitionIsDueFromItsHeal(t *testing.T) {
	h := clean()
	for i, c := range h.Truth {
		if c.Kind == Created && c.Key.Czxid == 20 {
			h.Truth[i].At = at(17000)
		}
	}
	h.Blinds = []Blind{{Target: "b", From: at(0), To: at(3000), What: "partition"}}
	if r := Reregistration(h, NewTruth(h), DefaultBounds); len(r.Violations) != 0 {
		t.Errorf("violations %+v for a registration made 14 s after the partition's heal (timeout 4 s + 10 s)", r.Violations)
	}
	h.Truth = h.Truth[:len(h.Truth)-1] // drop a's drain: unrelated
	h.End = at(40000)
	for i, c := range h.Truth {
		if c.Kind == Created && c.Key.Czxid == 20 {
			h.Truth[i].At = at(17100)
		}
	}
	only(t, Reregistration(h, NewTruth(h), DefaultBounds), CheckReregistration, "")
}

func TestANonConvergedConsumerIsFlagged(t *testing.T) {
	h := clean()
	// A consumer that stopped at its first set: at the second heal
	// ZooKeeper holds {b} and it still publishes {a,b}.
	h.Publishes = append(h.Publishes, pub(120, "catalog", m("a:1", 0), m("b:1", 0)))
	v := only(t, Convergence(h, NewTruth(h), DefaultBounds), CheckConvergence, "catalog")
	if !strings.Contains(v.What, "{a:1,b:1}") || !strings.Contains(v.What, "ZooKeeper has {b:1}") {
		t.Errorf("%q does not say what it publishes and what ZooKeeper has", v.What)
	}
}

func TestAConsumerStuckInErrorHasNotConverged(t *testing.T) {
	h := clean()
	h.Publishes = append(h.Publishes, Publish{At: at(4900), Consumer: "instancer", Service: svc, Members: []Member{m("b:1", 0)}, Err: "sd: disconnected"})
	only(t, Convergence(h, NewTruth(h), DefaultBounds), CheckConvergence, "instancer")
}

func TestFailedAndDuplicatedRequestsAreFlagged(t *testing.T) {
	h := clean()
	h.Requests = append(h.Requests,
		Request{At: at(3000), Done: at(3050), Gateway: "gw-1", Failed: true, Reason: "HTTP 502: no endpoints"},
		Request{At: at(1500), Done: at(1520), Gateway: "gw-2", Post: true, Key: "k2", Failed: true, Reason: "HTTP 502: attempt 1 on c:1: EOF"},
		Request{At: at(3100), Done: at(3150), Gateway: "gw-2", Post: true, Key: "k3"},
	)
	h.Executions["k3"] = 2
	r := Requests(h)
	if r.Failed != 2 || r.Duplicated != 1 {
		t.Errorf("failed=%d duplicated=%d, want 2 (a 502, a POST sent after the crashed provider died) and 1", r.Failed, r.Duplicated)
	}
	if got := checks(r.Violations); len(got) != 3 {
		t.Errorf("violations %v, want 3 (two failure reasons, one duplicate)", got)
	}
}

func TestWriteLeavesAHistoryThatReadsBack(t *testing.T) {
	h := clean()
	h.Publishes = append(h.Publishes, pub(6000, "instancer", m("z:9", 0)))
	r := Check(h, DefaultBounds)
	dir := filepath.Join(t.TempDir(), "seed-7")
	if err := Write(dir, h, r); err != nil {
		t.Fatal(err)
	}
	back, err := Read(filepath.Join(dir, "history.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := Check(back, DefaultBounds); len(got.Violations) != len(r.Violations) || got.Checks != r.Checks {
		t.Errorf("read back: %d violations, %d checks; written %d, %d", len(got.Violations), got.Checks, len(r.Violations), r.Checks)
	}
	rep, err := os.ReadFile(filepath.Join(dir, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rep), "phantom [instancer quote]") {
		t.Errorf("report.txt does not say what broke and which consumer:\n%s", rep)
	}
}

func TestConvergenceReportsTheSlowestConsumer(t *testing.T) {
	h := clean()
	// catalog shows {b} only 300 ms after the second heal.
	h.Publishes = append(h.Publishes, pub(120, "catalog", m("a:1", 0), m("b:1", 0)), pub(5300, "catalog", m("b:1", 0)))
	r := Convergence(h, NewTruth(h), DefaultBounds)
	if len(r.Violations) != 0 {
		t.Fatalf("violations %+v", r.Violations)
	}
	if r.Slowest != 300*time.Millisecond || r.SlowestBy != "catalog quote" {
		t.Errorf("slowest %v by %q, want 300ms by catalog quote", r.Slowest, r.SlowestBy)
	}
}

func TestCheckCountsEachValidatorsAssertions(t *testing.T) {
	r := Check(clean(), DefaultBounds)
	for _, name := range []string{CheckConvergence, CheckPhantom + "/" + CheckResurrection, CheckGoingBack, CheckReregistration, CheckRequests} {
		if r.ByCheck[name] == 0 {
			t.Errorf("%s made no assertion over the clean history (by check: %s)", name, r.ByCheckString())
		}
	}
}

func TestChangesSeenInOneReadAreNotOrdered(t *testing.T) {
	h := clean()
	// b's expiry and c's stop seen in one read: the consumer saw c go
	// first ({a,b} is no older than that read).
	h.Truth = append(h.Truth, change(6000, Created, pathC, 30, "c:1", true),
		change(7000, Deleted, pathB, 20, "b:1", false), change(7000, Deleted, pathC, 30, "c:1", false))
	h.Publishes = append(h.Publishes, pub(6100, "instancer", m("b:1", 0), m("c:1", 0)),
		pub(6990, "instancer", m("b:1", 0)), pub(7010, "instancer"))
	if r := GoingBack(h, NewTruth(h), DefaultBounds); len(r.Violations) != 0 {
		t.Errorf("violations %+v for an order the truth recorder could not see", r.Violations)
	}
}

// Seed 3394154872406117236 of 50: the set a consumer publishes on the way
// through the changes of one read is as new as that read, even when
// ZooKeeper's set comes back to it later (a creation and a status flip
// seen in one read, the flip undone the next): publishing the read's own
// set after it is not going back.
func TestASetOnTheWayWithinOneReadIsAsNewAsThatRead(t *testing.T) {
	h := clean()
	// {b} until 6 s; one read sees c created and a back UP ({a,b,c});
	// a goes out again at 6.5 s ({b,c}, the set on the way before).
	h.Truth = append(h.Truth, change(6000, Created, pathC, 30, "c:1", true),
		change(6000, Changed, pathA, 10, "a:1", true), change(6500, Changed, pathA, 10, "a:1", false))
	h.Publishes = append(h.Publishes, pub(5990, "instancer", m("b:1", 0), m("c:1", 0)),
		pub(5995, "instancer", m("a:1", 0), m("b:1", 0), m("c:1", 0)), pub(6490, "instancer", m("b:1", 0), m("c:1", 0)))
	if r := GoingBack(h, NewTruth(h), DefaultBounds); len(r.Violations) != 0 {
		t.Errorf("violations %+v for a set on the way within one read", r.Violations)
	}
	// Going back from that read's set to the one before it is flagged.
	h.Publishes = append(h.Publishes, pub(7000, "instancer", m("b:1", 0)))
	only(t, GoingBack(h, NewTruth(h), DefaultBounds), CheckGoingBack, "instancer")
}

// The run's bounds come from its timeouts: a longer session timeout
// widens convergence, and the derived bound is tighter than the fixed one
// it replaced for the chaos run's 4 s session.
func TestRunBoundsFollowTheTimeouts(t *testing.T) {
	b := RunBounds(4*time.Second, time.Second)
	if b.Converge != 7*time.Second || b.Reregister != b.Converge || b.Skew != time.Second {
		t.Fatalf("RunBounds(4s, 1s) = %+v, want converge 7s, reregister 7s, skew 1s", b)
	}
	if longer := RunBounds(10*time.Second, time.Second); longer.Converge <= b.Converge {
		t.Fatalf("a 10s session timeout gives converge %v, not more than %v", longer.Converge, b.Converge)
	}
}
