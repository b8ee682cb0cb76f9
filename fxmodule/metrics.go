package fxmodule

import (
	"github.com/go-kit/kit/metrics"

	"github.com/gracekit/gracekit/lifecycle"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown/flush"
)

// Metrics are the go-kit metrics (any backend) that Discovery and Gateway
// update when a *Metrics is in the container (fx.Supply(&fxmodule.Metrics{...}));
// without one, or for a nil field, nothing is counted. The endpoints of
// Upstreams take theirs through WithRetry and WithEndpointer
// (endpoint.WithRetryReasonCounter, endpoint.WithEjectionReasonCounter...).
type Metrics struct {
	// StepDuration observes each start and stop step's duration, in
	// seconds (lifecycle.HistogramListener: labels step, phase, outcome).
	StepDuration metrics.Histogram
	// Instancer are given to every sd.Instancer the module makes (the
	// Upstreams' services and the FlushGateways), each metric scoped
	// With("service", <name>): declare a "service" label.
	Instancer sd.InstancerMetrics
	// FlushCalls counts the flush calls of the stop (flush.CallCounter:
	// labels kind, outcome).
	FlushCalls metrics.Counter
	// FlushRefusals and FlushResults count what Gateway's flush handler
	// refused and acknowledged (flush.RefusalCounter, label reason;
	// flush.ResultCounter, label result).
	FlushRefusals metrics.Counter
	FlushResults  metrics.Counter
}

// metrics returns the supplied Metrics, or an empty one.
func (p loggerParams) metrics() *Metrics {
	if p.Metrics == nil {
		return &Metrics{}
	}
	return p.Metrics
}

// instancerOptions scopes the Instancer metrics to service.
func (m *Metrics) instancerOptions(service string) []sd.InstancerOption {
	im := m.Instancer
	if im == (sd.InstancerMetrics{}) {
		return nil
	}
	if im.Instances != nil {
		im.Instances = im.Instances.With("service", service)
	}
	for _, c := range []*metrics.Counter{&im.WatchEvents, &im.Malformed, &im.Unreadable, &im.Evictions} {
		if *c != nil {
			*c = (*c).With("service", service)
		}
	}
	return []sd.InstancerOption{sd.WithMetrics(im)}
}

func (m *Metrics) lifecycleOptions() []lifecycle.Option {
	if m.StepDuration == nil {
		return nil
	}
	return []lifecycle.Option{lifecycle.WithListener(lifecycle.HistogramListener(m.StepDuration))}
}

func (m *Metrics) notifierOptions() []flush.NotifierOption {
	if m.FlushCalls == nil {
		return nil
	}
	return []flush.NotifierOption{flush.CallCounter(m.FlushCalls)}
}

func (m *Metrics) handlerOptions() []flush.HandlerOption {
	var opts []flush.HandlerOption
	if m.FlushRefusals != nil {
		opts = append(opts, flush.RefusalCounter(m.FlushRefusals))
	}
	if m.FlushResults != nil {
		opts = append(opts, flush.ResultCounter(m.FlushResults))
	}
	return opts
}
