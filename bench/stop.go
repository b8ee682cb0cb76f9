package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gracekit/gracekit/internal/testbed"
	"github.com/gracekit/gracekit/zktest"
)

// The stop suite: how long an idle provider's whole stop sequence takes with
// two acking gateways. go-kit has no stop sequence to compare with; today's
// practice is a fixed sleep of 3 to 15 s.
func init() { register("stop", runStop) }

const stopRuns = 5

func runStop() error {
	dir, err := os.MkdirTemp("", "gracekit-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cluster, err := zktest.Start(dir)
	if err != nil {
		return err
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var urls []string
	for range 2 {
		gw, err := testbed.StartGateway(cluster.ConnectString(), "quote")
		if err != nil {
			return err
		}
		defer gw.Close()
		urls = append(urls, gw.FlushURL)
	}
	var took []float64
	for i := range stopRuns {
		p, err := testbed.StartProvider(ctx, testbed.ProviderConfig{
			Connect: cluster.ConnectString(), Service: "quote", ID: fmt.Sprintf("idle-%d", i), FlushURL: urls,
		})
		if err != nil {
			return err
		}
		if err := p.Seq.Stop(ctx); err != nil {
			return err
		}
		rep := p.Seq.Report()
		for _, f := range rep.Flush {
			if !f.Acked {
				return fmt.Errorf("gateway %s did not ack: %v", f.Target, f.Err)
			}
		}
		took = append(took, ms(rep.Duration))
	}
	report("stop_idle_2gw", pct(took, 50), 0, "ms")
	return nil
}
