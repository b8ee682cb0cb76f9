package main

import (
	"context"
	"strconv"
	"time"

	"github.com/gracekit/gracekit/examples/internal/history"
)

// The ramp of robustness mode's gracekit gateways (GRACEKIT_SLOW_START_*):
// a window short enough that a restart's ramp ends within a round or two,
// so that the ramp validator sees whole windows.
const (
	rampWindow     = 10 * time.Second
	rampAggression = 1.0
	rampMinWeight  = 0.1
)

// rampEnv gives gateway in the run's ramp.
func rampEnv(in *instance) {
	in.vars["GRACEKIT_SLOW_START_WINDOW"] = rampWindow.String()
	in.vars["GRACEKIT_SLOW_START_AGGRESSION"] = strconv.FormatFloat(rampAggression, 'g', -1, 64)
	in.vars["GRACEKIT_SLOW_START_MIN_WEIGHT"] = strconv.FormatFloat(rampMinWeight, 'g', -1, 64)
}

// slowStart is the ramp the history holds the gateways to: the gracekit
// gateways ramp; grpc-go's round_robin does not.
func (d *driver) slowStart() *history.SlowStart {
	s := &history.SlowStart{Window: rampWindow, Aggression: rampAggression, MinWeight: rampMinWeight}
	for _, g := range d.groups {
		for i, gw := range g.gateways {
			if g.names[i] == "gracekit" {
				s.Gateways = append(s.Gateways, gw.id)
			}
		}
	}
	return s
}

// faultRestartDrain stops a provider gracefully and starts it again (it
// ramps in), then, once it is ready, drains the next provider of its
// group for st.For and undrains it: the drain and the undrain rebuild
// every gateway's set while the restarted one ramps, and the ramp must
// go on through them (ramp validator).
func (d *driver) faultRestartDrain(ctx context.Context, rs *robustState, st step, round int) error {
	restart := step{Kind: kSigterm, Group: st.Group, Slot: st.Slot}
	if err := d.robustStep(ctx, rs, restart, round); err != nil {
		return err
	}
	g := d.groups[st.Group%len(d.groups)]
	drain := step{Kind: kDrain, Group: st.Group, Slot: (st.Slot + 1) % len(g.providers), For: st.For}
	return d.robustStep(ctx, rs, drain, round)
}
