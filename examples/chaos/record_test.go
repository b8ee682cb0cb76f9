package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gracekit/gracekit/examples/internal/history"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// waitPublished waits until every one of consumers last published want for
// service.
func waitPublished(t *testing.T, log *publishLog, service string, want []string, consumers ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		last := map[string][]string{}
		for _, p := range log.all() {
			if p.Service == service && p.Err == "" {
				var got []string
				for _, m := range p.Members {
					got = append(got, m.Addr)
				}
				slices.Sort(got)
				last[p.Consumer] = got
			}
		}
		ok := true
		for _, c := range consumers {
			if !slices.Equal(last[c], want) {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 30s the consumers last published %v, want %v from %v", last, want, consumers)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRecordedHistoriesPassAndABrokenConsumerFails records a real
// ZooKeeper's truth and four consumers (sd.Instancer, sd.Catalog,
// grpcresolver, and one that ignores deletions) while instances register,
// deregister and are drained: the checker passes the three and flags the
// broken one.
// waitTruth waits until the truth recorder's last read saw the node at p
// held (and UP) or not.
func waitTruth(t *testing.T, r *truthRecorder, p string, held, up bool) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("the truth holding %s held=%v up=%v", p, held, up), func() bool {
		h, u := r.holds(p)
		return h == held && u == up
	})
}

func TestRecordedHistoriesPassAndABrokenConsumerFails(t *testing.T) {
	zk := zktest.New(t)
	const base, svc = "/record-test", "svc"
	connect := zk.ConnectString()
	timeout := 4 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	h := &history.History{Start: time.Now(), SessionTimeout: timeout}
	truth, err := newTruthRecorder(zk.Addrs(), nil, base, []string{svc})
	if err != nil {
		t.Fatal(err)
	}
	log := &publishLog{}
	good := []string{"instancer", "catalog", "resolver"}
	var recs []recorder
	for _, c := range []struct {
		name             string
		catalog, ignores bool
	}{{"instancer", false, false}, {"catalog", true, false}, {"broken", false, true}} {
		r, err := newInstancerRecorder(c.name, connect, base, []string{svc}, timeout, c.catalog, c.ignores, log)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	rr, err := newResolverRecorder(ctx, "resolver", connect, base, []string{svc}, timeout, log)
	if err != nil {
		t.Fatal(err)
	}
	recs = append(recs, rr)
	defer func() {
		for _, r := range recs {
			r.Stop()
		}
	}()

	c, err := sd.NewClient(connect, sd.SessionTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	regs := map[string]*sd.Registrar{}
	for i, id := range []string{"a", "b"} {
		reg, err := sd.NewRegistrar(c, sd.Instance{Name: svc, ID: id, Address: "127.0.0.1", Port: 1001 + i}, sd.BasePath(base))
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.RegisterContext(ctx); err != nil {
			t.Fatal(err)
		}
		regs[id] = reg
		h.Runs = append(h.Runs, history.Run{Service: svc, ID: id, Path: reg.Path(), Start: time.Now()})
	}
	waitPublished(t, log, svc, []string{"127.0.0.1:1001", "127.0.0.1:1002"}, append(good, "broken")...)
	// b lives a few milliseconds: the test needs the truth to hold it.
	waitTruth(t, truth, regs["b"].Path(), true, true)
	h.Heals = append(h.Heals, history.Heal{At: time.Now(), What: "registered"})

	h.Runs[1].Stopping, h.Runs[1].How = time.Now(), "deregister"
	if err := regs["b"].DeregisterContext(ctx); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, log, svc, []string{"127.0.0.1:1001"}, good...)
	waitTruth(t, truth, regs["b"].Path(), false, false)
	// The operator drains a: its Registrar writes OUT_OF_SERVICE.
	zr, err := dialZK(zk.Addrs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	if err := zr.drain(svc, regs["a"].Path(), false); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, log, svc, nil, good...)
	waitTruth(t, truth, regs["a"].Path(), true, false)
	h.Heals = append(h.Heals, history.Heal{At: time.Now(), What: "deregistered b, drained a"})

	for _, r := range recs {
		r.Stop()
	}
	h.Truth, h.Gaps = truth.Close()
	h.Publishes = log.all()
	// Nothing changes once the recorders stopped: the history holds
	// until the last heal's bound.
	h.End = time.Now().Add(history.DefaultBounds.Converge)

	rep := history.Check(h, history.DefaultBounds)
	var buf bytes.Buffer
	history.WriteReport(&buf, h, rep)
	byConsumer := map[string]int{}
	for _, v := range rep.Violations {
		byConsumer[v.Consumer]++
	}
	for _, c := range good {
		if byConsumer[c] != 0 {
			t.Errorf("%d violations for %s, a correct consumer:\n%s", byConsumer[c], c, buf.String())
		}
	}
	if byConsumer["broken"] == 0 {
		t.Errorf("no violation for the consumer that ignores deletions:\n%s", buf.String())
	}
	if created := slices.ContainsFunc(h.Truth, func(c history.Change) bool { return c.Kind == history.Deleted && c.ID == "b" }); !created {
		t.Errorf("the truth does not hold b's deletion: %+v", h.Truth)
	}
}

// TestTheTruthMarksWhatItMissed makes changes between two reads that no
// read can see (a node created and deleted, a node changed twice) and
// checks that each is a gap, which the checks count as unverified rather
// than as violations; changes it saw are no gap.
func TestTheTruthMarksWhatItMissed(t *testing.T) {
	zk := zktest.New(t)
	const base, svc = "/truth-missed", "svc"
	r, err := dialTruth(zk.Addrs(), nil, base, []string{svc})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := sd.NewClient(zk.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg := func(id string, port int) *sd.Registrar {
		t.Helper()
		g, err := sd.NewRegistrar(c, sd.Instance{Name: svc, ID: id, Address: "127.0.0.1", Port: port}, sd.BasePath(base))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.RegisterContext(ctx); err != nil {
			t.Fatal(err)
		}
		return g
	}
	gaps := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.gaps)
	}
	r.read()
	a := reg("a", 1001)
	r.read()
	if held, _ := r.holds(a.Path()); !held || gaps() != 0 {
		t.Fatalf("a seen: held=%v, %d gaps; want held, no gap", held, gaps())
	}

	b := reg("b", 1002) // created and deleted between two reads
	if err := b.DeregisterContext(ctx); err != nil {
		t.Fatal(err)
	}
	r.read()
	if gaps() != 1 {
		t.Fatalf("a node created and deleted between reads: %d gaps, want 1", gaps())
	}

	for _, st := range []sd.Status{sd.StatusOutOfService, sd.StatusUp} { // two data changes, one read
		if err := a.SetStatus(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	r.read()
	if gaps() != 2 {
		t.Fatalf("a node changed twice between reads: %d gaps, want 2", gaps())
	}

	if err := a.SetStatus(ctx, sd.StatusOutOfService); err != nil {
		t.Fatal(err)
	}
	d := reg("d", 1004)
	r.read()
	if held, up := r.holds(a.Path()); !held || up || gaps() != 2 {
		t.Fatalf("changes the read saw: a held=%v up=%v, %d gaps; want a held out of service, still 2 gaps", held, up, gaps())
	}
	if held, _ := r.holds(d.Path()); !held {
		t.Fatal("d, created before the read, is not held")
	}

	e := reg("e", 1005) // created and changed between two reads
	if err := e.SetStatus(ctx, sd.StatusOutOfService); err != nil {
		t.Fatal(err)
	}
	r.read()
	if gaps() != 3 {
		t.Fatalf("a node created and changed between reads: %d gaps, want 3", gaps())
	}
}

func TestChangeTimeIsZooKeepersStampWithinTheReads(t *testing.T) {
	base := time.Date(2026, 12, 4, 5, 19, 19, 0, time.UTC)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	tests := []struct {
		name                 string
		give, lastRead, read time.Time
		want                 time.Time
	}{
		{"a change made in a gap is timed by its stamp, not the read after", ms(560), ms(437), ms(1725), ms(560)},
		{"a stamp after the read is the read", ms(1800), ms(437), ms(1725), ms(1725)},
		{"a stamp at or before the last read is just after it", ms(400), ms(437), ms(1725), ms(438)},
		{"no stamp (a deletion) is the read", time.Time{}, ms(437), ms(1725), ms(1725)},
		{"the first read keeps an early stamp", ms(-5000), time.Time{}, ms(1725), ms(-5000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := changeTime(tt.give, tt.lastRead, tt.read); !got.Equal(tt.want) {
				t.Errorf("changeTime = %s, want %s", got.Format("05.000"), tt.want.Format("05.000"))
			}
		})
	}
}
