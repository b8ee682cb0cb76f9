package endpoint

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// propertySeeds are the seeds of the weighted-balancer property test:
// fixed ones, so that every run checks the same cases, or
// GRACEKIT_WEIGHT_SEEDS (comma separated) to replay or explore.
func propertySeeds(t *testing.T) []uint64 {
	t.Helper()
	if v := os.Getenv("GRACEKIT_WEIGHT_SEEDS"); v != "" {
		var seeds []uint64
		for _, f := range strings.Split(v, ",") {
			s, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("GRACEKIT_WEIGHT_SEEDS: %v", err)
			}
			seeds = append(seeds, s)
		}
		return seeds
	}
	seeds := make([]uint64, 24)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds
}

// shareTolerance is how far n picks may stray from n·p for an instance
// whose share is p. Random's and P2C's first picks are independent draws,
// binomial(n, p): six sigmas make a false alarm about 2e-9 per check, about
// 1e-6 over the whole test. RoundRobin's stride schedule is within a pick
// or two of n·p, except for picks that spill, which are draws again. The
// 0.2% of n covers the 16-bit scaling of the weights.
func shareTolerance(n int, p float64) float64 {
	return 6*math.Sqrt(float64(n)*p*(1-p)) + 0.002*float64(n) + 2
}

// The property of the weighted balancers: whatever the weights, ramps,
// ejections and closings, each instance's share of first picks is its
// weight among the available instances, and an unavailable instance gets
// none. Each seed draws a case: 2 to 8 instances with random metadata
// weights, some in the first load and some joining later (registered at a
// random age in or past the window, in the future, or at no known time),
// a random ramp shape, and some ejected (connect failures) or closing (the
// closing signal), at least one available. The clocks stand still, so the
// weights do not move while it counts.
func TestWeightedBalancersShareFirstPicksByWeight(t *testing.T) {
	const picks = 20000
	for _, seed := range propertySeeds(t) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
			c := drawWeightCase(rng)
			e := c.build(t)
			want := c.shares()
			for _, tt := range []struct {
				name string
				new  func(*Endpointer) (picker, error)
			}{
				{"round robin", func(e *Endpointer) (picker, error) { return NewRoundRobin(e) }},
				{"random", func(e *Endpointer) (picker, error) { return NewRandom(e) }},
				{"p2c", func(e *Endpointer) (picker, error) { return NewP2C(e) }},
			} {
				b, err := tt.new(e)
				if err != nil {
					t.Fatal(err)
				}
				got := shares(t, b, picks)
				for i, name := range c.names {
					p := want[i]
					if d := math.Abs(float64(got[name]) - p*picks); d > shareTolerance(picks, p) {
						t.Errorf("seed %d (replay with GRACEKIT_WEIGHT_SEEDS=%d), %s: %s got %d of %d first picks, want %.0f ± %.0f\ncase: %s\npicks: %v",
							seed, seed, tt.name, name, got[name], picks, p*picks, shareTolerance(picks, p), c, got)
						break
					}
				}
			}
		})
	}
}

// weightCase is one drawn case of the property test.
type weightCase struct {
	s      SlowStart
	now    time.Time
	names  []string
	weight []float64   // metadata weight; 1 is written as absent
	joins  []bool      // joins after the first load
	reg    []time.Time // registration time of a joiner; zero: unknown
	out    []string    // "", "ejected" or "closing"
}

func drawWeightCase(rng *rand.Rand) *weightCase {
	n := 2 + rng.IntN(7)
	c := &weightCase{
		s: SlowStart{
			Window:     10 * time.Second,
			Aggression: []float64{0.5, 1, 2}[rng.IntN(3)],
			MinWeight:  []float64{0.05, 0.1, 0.3}[rng.IntN(3)],
		},
		now:    time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC),
		names:  make([]string, n),
		weight: make([]float64, n),
		joins:  make([]bool, n),
		reg:    make([]time.Time, n),
		out:    make([]string, n),
	}
	available := 0
	for i := range n {
		c.names[i] = fmt.Sprintf("i%d", i)
		c.weight[i] = 1
		if rng.IntN(3) > 0 {
			c.weight[i] = math.Round((0.25+4*rng.Float64())*100) / 100
		}
		c.joins[i] = i > 0 && rng.IntN(2) == 0
		switch k := rng.IntN(10); {
		case k == 0:
			c.reg[i] = c.now.Add(time.Minute) // a clock ahead of ours
		case k == 1: // unknown
		default:
			c.reg[i] = c.now.Add(-time.Duration(rng.Int64N(int64(15 * time.Second))))
		}
		switch rng.IntN(3) {
		case 0:
			c.out[i] = "ejected"
		case 1:
			c.out[i] = "closing"
		default:
			available++
		}
	}
	if available == 0 {
		c.out[rng.IntN(n)] = ""
	}
	return c
}

func (c *weightCase) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ramp %v^(1/%v) from %v;", c.s.Window, c.s.Aggression, c.s.MinWeight)
	for i, name := range c.names {
		fmt.Fprintf(&b, " %s(weight %v", name, c.weight[i])
		if c.joins[i] {
			if c.reg[i].IsZero() {
				b.WriteString(", joins, registered at no known time")
			} else {
				fmt.Fprintf(&b, ", joins, registered %v ago", c.now.Sub(c.reg[i]))
			}
		}
		if c.out[i] != "" {
			b.WriteString(", " + c.out[i])
		}
		b.WriteString(")")
	}
	return b.String()
}

// shares is each instance's expected share of first picks.
func (c *weightCase) shares() []float64 {
	ws := make([]float64, len(c.names))
	var sum float64
	for i := range c.names {
		if c.out[i] != "" {
			continue
		}
		ws[i] = c.weight[i]
		if c.joins[i] {
			reg := c.reg[i]
			if reg.IsZero() || reg.After(c.now) {
				reg = c.now // ramps from first sight: now
			}
			ws[i] *= c.s.Factor(reg, c.now)
		}
		sum += ws[i]
	}
	for i := range ws {
		ws[i] /= sum
	}
	return ws
}

// build makes the case's Endpointer: the first load, then the joiners,
// then the ejections and closings through calls that fail or carry the
// closing signal.
func (c *weightCase) build(t *testing.T) *Endpointer {
	t.Helper()
	var first []string
	src := newDescribed()
	for i, name := range c.names {
		w := ""
		if c.weight[i] != 1 {
			w = strconv.FormatFloat(c.weight[i], 'g', -1, 64)
		}
		reg := c.reg[i]
		if !c.joins[i] {
			reg = c.now.Add(-time.Second) // young, but in the first load
			first = append(first, name)
		}
		src.set(name, reg, w)
	}
	src.Set(first...)
	fl := newFleet()
	e, err := NewEndpointer(src, fl.factory, withClock(newClock().now), withWallClock(func() time.Time { return c.now }),
		WithSlowStart(c.s.Window, c.s.Aggression, c.s.MinWeight), EjectAfter(1), MaxEjectedShare(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	src.Set(c.names...)
	settle(e)
	eps, _ := e.Endpoints() // sorted as c.names
	if len(eps) != len(c.names) {
		t.Fatalf("%d endpoints for %d instances", len(eps), len(c.names))
	}
	for i, name := range c.names {
		switch c.out[i] {
		case "ejected":
			fl.get(t, name).fail(refused())
		case "closing":
			fl.get(t, name).closing.Store(true)
		default:
			continue
		}
		_, _ = eps[i](context.Background(), nil)
		if !ejected(e, name) {
			t.Fatalf("%s is not out after the call that made it %s", name, c.out[i])
		}
	}
	return e
}
