package grpcresolver

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/resolver"

	"github.com/gracekit/gracekit/endpoint"
)

// pickerSeeds are the seeds of the picker's property test: fixed ones, or
// GRACEKIT_WEIGHT_SEEDS (comma separated) to replay or explore.
func pickerSeeds(t *testing.T) []uint64 {
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

// The property of endpoint's weighted balancers, on the gRPC picker:
// whatever the weights, ramps and SubConn states, each ready SubConn's
// share of picks is its weight among the ready ones; one that is not ready
// (connecting, or in transient failure after an ejection or a closing
// provider's GOAWAY) gets none, since grpc-go builds the picker from the
// ready ones only. Each seed draws 2 to 8 addresses with random metadata
// weights, some in the channel's first update and some in a later one
// (registered at a random age, in the future, at no known time, or not
// described at all), a random ramp shape, and some not ready; the picker
// is then rebuilt a few times, a few seconds apart, as grpc-go does when
// SubConns change state. The clock stands still while it counts.
//
// The picker's stride schedule is deterministic: it strays from n·p by a
// pick or two per address; the tolerance allows 0.2% of n more for the
// 16-bit scaling of the weights, and six binomial sigmas, as for
// endpoint's Random, so that one bound serves both.
func TestWeightedPickerSharesPicksByWeight(t *testing.T) {
	const picks = 20000
	for _, seed := range pickerSeeds(t) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
			n := 2 + rng.IntN(7)
			clk := &manualClock{t: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}
			s := endpoint.SlowStart{
				Window:     10 * time.Second,
				Aggression: []float64{0.5, 1, 2}[rng.IntN(3)],
				MinWeight:  []float64{0.05, 0.1, 0.3}[rng.IntN(3)],
			}
			pb := &pickerBuilder{s: s, seen: map[string]time.Time{}, now: clk.now}
			defer pb.close()
			seenAt := clk.t // when the later update comes
			var (
				first, all []resolver.Address
				ready      = map[balancer.SubConn]base.SubConnInfo{}
				weight     = make([]float64, n)
				desc       = make([]string, n)
			)
			for i := range n {
				name := fmt.Sprintf("10.0.0.%d:50051", i+1)
				w, meta := 1.0, map[string]string(nil)
				if rng.IntN(3) > 0 {
					w = math.Round((0.25+4*rng.Float64())*100) / 100
					meta = map[string]string{endpoint.MetadataWeight: strconv.FormatFloat(w, 'g', -1, 64)}
				}
				joins := i > 0 && rng.IntN(2) == 0
				var reg time.Time
				described := true
				switch k := rng.IntN(10); {
				case k == 0:
					reg = seenAt.Add(time.Minute) // a clock ahead of ours
				case k == 1: // no registration time
				case k == 2:
					described, w = false, 1 // not one of this package's addresses
				default:
					reg = seenAt.Add(-time.Duration(rng.Int64N(int64(15 * time.Second))))
				}
				if !joins {
					reg = seenAt.Add(-time.Second) // young, but in the first update
				}
				a := resolver.Address{Addr: name}
				if described {
					a = addrOf(name, reg, meta)
				}
				all = append(all, a)
				if !joins {
					first = append(first, a)
				}
				desc[i] = fmt.Sprintf("%s(weight %v", name, w)
				if joins {
					from := seenAt
					if described && !reg.IsZero() && reg.Before(seenAt) {
						from = reg
					}
					desc[i] += fmt.Sprintf(", joins, ramps from %v before the later update", seenAt.Sub(from))
					weight[i] = w * s.Factor(from, seenAt.Add(3*time.Second)) // at the last build
				} else {
					weight[i] = w
				}
				// The last address is ready when no other was drawn so: with
				// none ready there is nothing to pick (grpc-go's ErrPicker).
				if rng.IntN(3) == 0 && (i < n-1 || len(ready) > 0) {
					weight[i] = 0
					desc[i] += ", not ready"
				} else {
					ready[&stubSubConn{name: name}] = base.SubConnInfo{Address: a}
				}
				desc[i] += ")"
			}
			pb.update(balancer.ClientConnState{ResolverState: resolver.State{Addresses: first}})
			pb.update(balancer.ClientConnState{ResolverState: resolver.State{Addresses: all}})
			var p balancer.Picker
			for range 3 { // SubConns change state a second apart
				clk.t = clk.t.Add(time.Second)
				p = pb.Build(base.PickerBuildInfo{ReadySCs: ready})
			}
			got := picksOf(t, p, picks)
			var sum float64
			for _, w := range weight {
				sum += w
			}
			for i := range n {
				name := fmt.Sprintf("10.0.0.%d:50051", i+1)
				want := weight[i] / sum
				tol := 6*math.Sqrt(picks*want*(1-want)) + 0.002*picks + 2
				if d := math.Abs(float64(got[name]) - want*picks); d > tol {
					t.Fatalf("seed %d (replay with GRACEKIT_WEIGHT_SEEDS=%d): %s got %d of %d picks, want %.0f ± %.0f\ncase: ramp %v^(1/%v) from %v; %s\npicks: %v",
						seed, seed, name, got[name], picks, want*picks, tol, s.Window, s.Aggression, s.MinWeight, strings.Join(desc, " "), got)
				}
			}
		})
	}
}
