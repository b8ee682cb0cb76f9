package main

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitsd "github.com/go-kit/kit/sd"
	kitlb "github.com/go-kit/kit/sd/lb"
	"github.com/go-kit/log"

	"github.com/gracekit/gracekit/endpoint"
)

func init() { register("endpoint", benchEndpoint) }

// benchResponse is returned by every benchmark endpoint; boxing it does not
// allocate, so the figures count only the balancing and retry machinery.
var benchResponse any = struct{}{}

func benchFactory(string) (kitendpoint.Endpoint, io.Closer, error) {
	return func(context.Context, any) (any, error) { return benchResponse, nil }, nil, nil
}

func benchInstances(n int) kitsd.FixedInstancer {
	out := make(kitsd.FixedInstancer, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.0.0.%d:8080", i+1)
	}
	return out
}

// waitEndpoints waits until e has n endpoints: go-kit's Endpointer applies
// the Instancer's first set on its own goroutine.
func waitEndpoints(e kitsd.Endpointer, n int) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		eps, err := e.Endpoints()
		if err == nil && len(eps) == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("endpointer has %d endpoints (err %v), want %d", len(eps), err, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func benchEndpoint() error {
	const instances = 10
	src := benchInstances(instances)

	kitE := kitsd.NewEndpointer(src, benchFactory, log.NewNopLogger())
	defer kitE.Close()
	if err := waitEndpoints(kitE, instances); err != nil {
		return fmt.Errorf("go-kit: %w", err)
	}
	ourE, err := endpoint.NewEndpointer(src, benchFactory)
	if err != nil {
		return err
	}
	defer ourE.Close()
	if err := waitEndpoints(ourE, instances); err != nil {
		return fmt.Errorf("gracekit: %w", err)
	}

	kitRR := kitlb.NewRoundRobin(kitE)
	ourRR, err := endpoint.NewRoundRobin(ourE)
	if err != nil {
		return err
	}
	pick := func(b kitlb.Balancer) func(*testing.B) {
		return func(tb *testing.B) {
			tb.ReportAllocs()
			for tb.Loop() {
				if _, err := b.Endpoint(); err != nil {
					tb.Fatal(err)
				}
			}
		}
	}
	if err := side("endpoint_pick_roundrobin", pick(ourRR), pick(kitRR)); err != nil {
		return err
	}

	kitRetry := kitlb.Retry(3, time.Second, kitRR)
	ourRetry, err := endpoint.NewRetry(ourRR, endpoint.Attempts(3))
	if err != nil {
		return err
	}
	callBench := func(ep kitendpoint.Endpoint) func(*testing.B) {
		return func(tb *testing.B) {
			ctx := context.Background()
			tb.ReportAllocs()
			for tb.Loop() {
				if _, err := ep(ctx, nil); err != nil {
					tb.Fatal(err)
				}
			}
		}
	}
	return side("endpoint_retry_call", callBench(ourRetry), callBench(kitRetry))
}

// endpointRounds is how many times each benchmark runs, the sides taking
// turns, so that a round the machine was busy shows as spread.
const endpointRounds = 3

// side runs both benchmarks endpointRounds times and reports ns/op and
// allocs/op for each.
func side(name string, ours, gokit func(*testing.B)) error {
	var o, k []float64
	var oa, ka int64
	for range endpointRounds {
		ro := testing.Benchmark(ours)
		rk := testing.Benchmark(gokit)
		if ro.N == 0 || rk.N == 0 {
			return fmt.Errorf("%s: a benchmark failed", name)
		}
		o, k = append(o, nsPerOp(ro)), append(k, nsPerOp(rk))
		oa, ka = max(oa, ro.AllocsPerOp()), max(ka, rk.AllocsPerOp())
	}
	reportRounds(name, o, k, "ns")
	reportAllocs(name+"_allocs", float64(oa), float64(ka))
	return nil
}

// reportAllocs is report for allocation counts, where go-kit's 0 is a
// measured figure rather than a missing peer: it prints it, with ratio 1.00
// when both sides are 0.
func reportAllocs(name string, gracekit, gokit float64) {
	fmt.Printf("BENCH name=%s gracekit=%sallocs gokit=%sallocs %s\n", name, num(gracekit), num(gokit), spread([]float64{gracekit}, []float64{gokit}))
}

func nsPerOp(r testing.BenchmarkResult) float64 {
	return float64(r.T.Nanoseconds()) / float64(r.N)
}
