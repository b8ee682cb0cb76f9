package endpoint

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kitlb "github.com/go-kit/kit/sd/lb"
)

// described is a chanInstancer that is also a Describer, with the
// registration times and metadata the test sets.
type described struct {
	*chanInstancer
	mu   sync.Mutex
	reg  map[string]time.Time
	meta map[string]map[string]string
}

func newDescribed(instances ...string) *described {
	return &described{chanInstancer: newChanInstancer(instances...), reg: map[string]time.Time{}, meta: map[string]map[string]string{}}
}

func (d *described) set(name string, registered time.Time, weight string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reg[name] = registered
	if weight != "" {
		d.meta[name] = map[string]string{MetadataWeight: weight}
	}
}

func (d *described) Describe(instance string) (time.Time, map[string]string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	reg, ok := d.reg[instance]
	return reg, d.meta[instance], ok
}

// wall is a manual wall clock for ramps.
type wall struct{ t atomic.Int64 }

func newWall() *wall {
	w := &wall{}
	w.t.Store(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC).UnixNano())
	return w
}
func (w *wall) now() time.Time          { return time.Unix(0, w.t.Load()) }
func (w *wall) advance(d time.Duration) { w.t.Add(int64(d)) }

func newDescribedEndpointer(t *testing.T, src *described, opts ...Option) *Endpointer {
	t.Helper()
	e, err := NewEndpointer(src, newFleet().factory, opts...)
	if err != nil {
		t.Fatalf("NewEndpointer: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// shares counts n picks of b by instance.
func shares(t *testing.T, b picker, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		in, err := b.pick(context.Background(), triedSet{})
		if err != nil {
			t.Fatal(err)
		}
		got[in.name]++
	}
	return got
}

func TestSlowStartFactor(t *testing.T) {
	reg := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	linear := SlowStart{Window: 10 * time.Second, Aggression: 1, MinWeight: 0.1}
	steep := SlowStart{Window: 10 * time.Second, Aggression: 2, MinWeight: 0.1}
	tests := []struct {
		name string
		s    SlowStart
		give time.Duration // now - registered
		want float64
	}{
		{"an instance registered now has the min weight", linear, 0, 0.1},
		{"below the min weight the min weight holds", linear, 500 * time.Millisecond, 0.1},
		{"mid-window a linear ramp is at half", linear, 5 * time.Second, 0.5},
		{"mid-window aggression 2 is at the square root of half", steep, 5 * time.Second, math.Sqrt(0.5)},
		{"at the window's end the weight is full", linear, 10 * time.Second, 1},
		{"past the window the weight is full", linear, time.Hour, 1},
		{"a registration in the future counts as now", linear, -30 * time.Second, 0.1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.Factor(reg, reg.Add(tt.give)); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("Factor after %v = %v, want %v", tt.give, got, tt.want)
			}
		})
	}
}

func TestParseWeight(t *testing.T) {
	tests := []struct {
		give    string
		want    float64
		wantErr bool
	}{
		{give: "", want: 1},
		{give: "100", want: 100},
		{give: " 0.5 ", want: 0.5},
		{give: "0", want: 1, wantErr: true},
		{give: "-3", want: 1, wantErr: true},
		{give: "heavy", want: 1, wantErr: true},
		{give: "NaN", want: 1, wantErr: true},
		{give: "+Inf", want: 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("weight %q", tt.give), func(t *testing.T) {
			got, err := ParseWeight(tt.give)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Fatalf("ParseWeight(%q) = %v, %v; want %v, error %v", tt.give, got, err, tt.want, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tt.give) {
				t.Fatalf("error %q does not name the value", err)
			}
		})
	}
}

func TestWithSlowStartRejectsBadInput(t *testing.T) {
	tests := []struct {
		name               string
		window             time.Duration
		aggression, weight float64
	}{
		{"a zero window", 0, 1, 0.1},
		{"a negative window", -time.Second, 1, 0.1},
		{"a zero aggression", time.Second, 0, 0.1},
		{"a NaN aggression", time.Second, math.NaN(), 0.1},
		{"an infinite aggression", time.Second, math.Inf(1), 0.1},
		{"a zero min weight", time.Second, 1, 0},
		{"a min weight above 1", time.Second, 1, 1.5},
	}
	for _, tt := range tests {
		t.Run("rejects "+tt.name, func(t *testing.T) {
			_, err := NewEndpointer(newChanInstancer("a"), newFleet().factory, WithSlowStart(tt.window, tt.aggression, tt.weight))
			if err == nil || !strings.HasPrefix(err.Error(), "endpoint: slow start") {
				t.Fatalf("got %v, want an endpoint: slow start error", err)
			}
		})
	}
}

func TestEqualWeightsTakeTheFastPath(t *testing.T) {
	src := newDescribed("a", "b", "c")
	reg := time.Now().Add(-time.Hour)
	src.set("a", reg, "")
	src.set("b", reg, "2")
	src.set("c", reg, "2")
	e := newDescribedEndpointer(t, src, WithSlowStart(time.Minute, 1, 0.1))
	if e.snap.Load().w == nil {
		t.Fatal("weights 1, 2, 2 got no table")
	}
	src.set("a", reg, "2")
	src.Set("b", "c")
	src.Set("a", "b", "c") // a joins again, registered an hour ago: no ramp
	settle(e)
	if w := e.snap.Load().w; w != nil {
		t.Fatalf("weights 2, 2, 2 got a table of %d", w.Len())
	}
}

func TestMetadataWeightsShareThePicks(t *testing.T) {
	src := newDescribed("a", "b", "c")
	reg := time.Now().Add(-time.Hour)
	src.set("a", reg, "1")
	src.set("b", reg, "2")
	src.set("c", reg, "") // absent: 1
	e := newDescribedEndpointer(t, src)
	rr, _ := NewRoundRobin(e)
	rnd, _ := NewRandom(e)
	p2c, _ := NewP2C(e)
	const n = 40000
	for name, b := range map[string]picker{"round robin": rr, "random": rnd, "p2c": p2c} {
		t.Run(name+" gives b twice the picks of a and c", func(t *testing.T) {
			got := shares(t, b, n)
			// Expected 10,000 / 20,000 / 10,000; random draws stray by
			// about 100, round robin by far less.
			for name, want := range map[string]int{"a": n / 4, "b": n / 2, "c": n / 4} {
				if d := got[name] - want; d > n/50 || d < -n/50 {
					t.Fatalf("picks %v, want about a=%d b=%d c=%d", got, n/4, n/2, n/4)
				}
			}
		})
	}
}

func TestSlowStartRampsOnlyInstancesThatJoin(t *testing.T) {
	clk := newWall()
	src := newDescribed("a", "b")
	// a and b registered a second before the first load: present at it,
	// they are not ramped although they are younger than the window.
	src.set("a", clk.now().Add(-time.Second), "")
	src.set("b", clk.now().Add(-time.Second), "")
	e := newDescribedEndpointer(t, src, withWallClock(clk.now), WithSlowStart(10*time.Second, 1, 0.1))
	if w := e.snap.Load().w; w != nil {
		t.Fatal("the first set got weights: it must not ramp")
	}
	rr, _ := NewRoundRobin(e)
	src.set("c", clk.now(), "")
	src.Set("a", "b", "c")
	settle(e)

	const n = 21000
	share := func() float64 { return float64(shares(t, rr, n)["c"]) / n }
	var got []float64
	for _, step := range []time.Duration{0, 2500 * time.Millisecond, 2500 * time.Millisecond, 2500 * time.Millisecond, 5 * time.Second} {
		clk.advance(step)
		e.reweigh()
		got = append(got, share())
	}
	// Weights 0.1, 0.25, 0.5, 0.75, 1 of the others' 1: c's shares.
	want := []float64{0.1 / 2.1, 0.25 / 2.25, 0.5 / 2.5, 0.75 / 2.75, 1.0 / 3}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 0.01 {
			t.Fatalf("c's shares over the window %.3f, want %.3f", got, want)
		}
		if i > 0 && got[i] <= got[i-1] {
			t.Fatalf("c's share did not grow: %.3f", got)
		}
	}
	if w := e.snap.Load().w; w != nil {
		t.Fatal("past the window c still has a weight of its own")
	}
}

func TestSlowStartMultipliesTheMetadataWeight(t *testing.T) {
	clk := newWall()
	src := newDescribed("a")
	src.set("a", clk.now().Add(-time.Hour), "")
	e := newDescribedEndpointer(t, src, withWallClock(clk.now), WithSlowStart(10*time.Second, 1, 0.1))
	rnd, _ := NewRandom(e)
	// b weighs 4 and registered 5 s ago: 4 · 0.5 = 2 against a's 1.
	src.set("b", clk.now().Add(-5*time.Second), "4")
	src.Set("a", "b")
	settle(e)
	const n = 30000
	got := shares(t, rnd, n)["b"]
	if want := 2 * n / 3; got < want-n/50 || got > want+n/50 {
		t.Fatalf("b got %d of %d picks, want about %d", got, n, want)
	}
}

func TestSlowStartWithoutARegistrationTimeRampsFromFirstSight(t *testing.T) {
	clk := newWall()
	src := newDescribed("a")
	src.set("a", time.Time{}, "")
	e := newDescribedEndpointer(t, src, withWallClock(clk.now), WithSlowStart(10*time.Second, 1, 0.1))
	rr, _ := NewRoundRobin(e)
	// b has no registration time, c one in the future (a clock ahead of
	// ours), d is not described at all: all three ramp from now.
	src.set("b", time.Time{}, "")
	src.set("c", clk.now().Add(time.Minute), "")
	src.Set("a", "b", "c", "d")
	settle(e)
	got := shares(t, rr, 21000)
	// a weighs 1, the others 0.1: 16,154 and 1,615 each of 21,000.
	for _, name := range []string{"b", "c", "d"} {
		if got[name] < 1500 || got[name] > 1750 {
			t.Fatalf("picks %v, want a near 16154, b, c and d near 1615", got)
		}
	}
}

func TestRampingInstanceIsEjectedLikeAnyOther(t *testing.T) {
	clk := newWall()
	src := newDescribed("a", "b")
	e, err := NewEndpointer(src, nil, withWallClock(clk.now), WithSlowStart(10*time.Second, 1, 0.1))
	if err == nil {
		_ = e.Close()
		t.Fatal("a nil factory was accepted")
	}
	fl := newFleet()
	e, err = NewEndpointer(src, fl.factory, withClock(newClock().now), withWallClock(clk.now), WithSlowStart(10*time.Second, 1, 0.1), EjectAfter(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	src.Set("a", "b", "c")
	settle(e)
	fl.get(t, "c").fail(refused())
	rr, _ := NewRoundRobin(e)
	// Call until c was picked once: it fails and is ejected.
	for i := 0; fl.get(t, "c").calls.Load() == 0; i++ {
		if i > 10000 {
			t.Fatal("c never picked")
		}
		_, _ = call(rr)
	}
	for range 1000 {
		if got, _ := call(rr); got == "c" {
			t.Fatal("the ejected ramping instance was picked")
		}
	}
}

func TestWeightedPicksDoNotAllocate(t *testing.T) {
	clk := newWall()
	src := newDescribed("a", "b", "c")
	e := newDescribedEndpointer(t, src, withWallClock(clk.now), WithSlowStart(10*time.Second, 1, 0.1))
	src.Set("a", "b", "c", "d")
	settle(e)
	if e.snap.Load().w == nil {
		t.Fatal("d does not ramp")
	}
	rr, _ := NewRoundRobin(e)
	rnd, _ := NewRandom(e)
	p2c, _ := NewP2C(e)
	for _, tt := range []struct {
		name string
		pick func()
	}{
		{"round robin", func() { _, _ = rr.Endpoint() }},
		{"random", func() { _, _ = rnd.Endpoint() }},
		{"p2c", func() { _, _ = p2c.Endpoint() }},
	} {
		if n := testing.AllocsPerRun(1000, tt.pick); n != 0 {
			t.Fatalf("%s: a weighted pick allocates %v times", tt.name, n)
		}
	}
}

func TestRampEndsOnItsOwnTicker(t *testing.T) {
	src := newDescribed("a")
	src.set("a", time.Now().Add(-time.Hour), "")
	e := newDescribedEndpointer(t, src, WithSlowStart(50*time.Millisecond, 1, 0.1))
	src.set("b", time.Now(), "")
	src.Set("a", "b")
	settle(e)
	if e.snap.Load().w == nil {
		t.Fatal("b does not ramp")
	}
	// The Endpointer's ticker brings b to its full weight by itself.
	deadline := time.Now().Add(10 * time.Second)
	for e.snap.Load().w != nil {
		if time.Now().After(deadline) {
			t.Fatal("b still ramps 10 s after a 50 ms window")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Issue 40: a pick that landed on an ejected instance went to the next one
// by name, so a ramping c (weight 0.1) next to an ejected b took b's share
// and more picks than the warm a. The share of b is spread by weight: a
// gets 1/1.1 of the picks, c 0.1/1.1.
func TestAnEjectedInstancesShareIsSpreadByWeight(t *testing.T) {
	clk := newWall()
	src := newDescribed("a", "b")
	src.set("a", clk.now().Add(-time.Hour), "")
	src.set("b", clk.now().Add(-time.Hour), "")
	fl := newFleet()
	e, err := NewEndpointer(src, fl.factory, withClock(newClock().now), withWallClock(clk.now), WithSlowStart(10*time.Second, 1, 0.1), EjectAfter(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	src.set("c", clk.now(), "")
	src.Set("a", "b", "c")
	settle(e)
	// b fails once and is ejected; the clock of cool-offs stands still.
	fl.get(t, "b").fail(refused())
	eps, _ := e.Endpoints() // a, b, c
	if _, err := eps[1](context.Background(), nil); err == nil {
		t.Fatal("b answered")
	}
	rr, _ := NewRoundRobin(e)
	rnd, _ := NewRandom(e)
	p2c, _ := NewP2C(e)
	const n = 22000
	for _, tt := range []struct {
		name string
		b    picker
	}{{"round robin", rr}, {"random", rnd}, {"p2c", p2c}} {
		t.Run(tt.name+" gives the warm instance the ejected one's share", func(t *testing.T) {
			got := shares(t, tt.b, n)
			// Expected a 20,000, c 2,000; random draws stray by about 43
			// (one sigma), so 400 is over 9 sigmas.
			if got["b"] != 0 || got["c"] < 1600 || got["c"] > 2400 {
				t.Fatalf("with b ejected, picks %v of %d; want a near 20000, c (ramping, weight 0.1) near 2000", got, n)
			}
		})
	}
	t.Run("a pick that spills does not allocate", func(t *testing.T) {
		for _, b := range []kitlb.Balancer{rr, rnd, p2c} {
			if allocs := testing.AllocsPerRun(1000, func() { _, _ = b.Endpoint() }); allocs != 0 {
				t.Fatalf("%T: a pick with b ejected allocates %v times", b, allocs)
			}
		}
	})
}

// registered is a described that also names registrations, as
// sd.Instancer does: a RegistrationDescriber.
type registered struct {
	*described
	ids map[string]string
	zx  map[string]int64
}

func newRegistered(instances ...string) *registered {
	return &registered{described: newDescribed(instances...), ids: map[string]string{}, zx: map[string]int64{}}
}

// register makes id (created at czxid) the newest registration of name.
func (r *registered) register(name, id string, czxid int64, at time.Time) {
	r.set(name, at, "")
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids[name], r.zx[name] = id, czxid
}

func (r *registered) Registration(instance string) (string, int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.reg[instance]
	return r.ids[instance], r.zx[instance], ok
}

// The ramp is keyed by the registration, not the instance string: b
// restarted on its address (a new id and node) while its old node still
// lists it ramps; its old node's end does not restart the ramp, and a
// node re-created in a new session, with the registration time it had,
// goes on from that time.
func TestSlowStartRampIsKeyedByTheRegistration(t *testing.T) {
	clk := newWall()
	src := newRegistered("a", "b")
	src.register("a", "a", 1, clk.now().Add(-time.Hour))
	src.register("b", "b", 2, clk.now().Add(-time.Hour))
	e, err := NewEndpointer(src, newFleet().factory, withWallClock(clk.now), WithSlowStart(10*time.Second, 1, 0.1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	rr, _ := NewRoundRobin(e)
	const n = 22000
	bShare := func() float64 { e.reweigh(); return float64(shares(t, rr, n)["b"]) / n }

	src.register("b", "b-restarted", 5, clk.now())
	src.Set("a", "b", "b") // the old node and the new one
	settle(e)
	if got := bShare(); math.Abs(got-0.1/1.1) > 0.01 {
		t.Fatalf("b restarted on its address has %.3f of the picks, want %.3f (weight 0.1)", got, 0.1/1.1)
	}
	clk.advance(5 * time.Second)
	src.Set("a", "b") // the old node ends
	settle(e)
	if got := bShare(); math.Abs(got-0.5/1.5) > 0.01 {
		t.Fatalf("5 s into b's ramp, after its old node ended, b has %.3f of the picks, want %.3f (weight 0.5)", got, 0.5/1.5)
	}
	src.register("b", "b-restarted", 9, clk.now().Add(-5*time.Second)) // a new session's node
	src.Set("a", "b")
	settle(e)
	if got := bShare(); math.Abs(got-0.5/1.5) > 0.01 {
		t.Fatalf("b's node re-created with its registration time has %.3f of the picks, want %.3f (weight 0.5)", got, 0.5/1.5)
	}
}

// Without ids (a plain Describer), a new registration time under the same
// string tells a new registration.
func TestSlowStartWithAPlainDescriberKeysTheRampByRegistrationTime(t *testing.T) {
	clk := newWall()
	src := newDescribed("a", "b")
	src.set("a", clk.now().Add(-time.Hour), "")
	src.set("b", clk.now().Add(-time.Hour), "")
	e := newDescribedEndpointer(t, src, withWallClock(clk.now), WithSlowStart(10*time.Second, 1, 0.1))
	rr, _ := NewRoundRobin(e)
	src.set("b", clk.now(), "")
	src.Set("a", "b")
	settle(e)
	if got := float64(shares(t, rr, 22000)["b"]) / 22000; math.Abs(got-0.1/1.1) > 0.01 {
		t.Fatalf("b registered again has %.3f of the picks, want %.3f (weight 0.1)", got, 0.1/1.1)
	}
}
