package fxmodule

import (
	"github.com/go-kit/kit/metrics"

	"github.com/gracekit/gracekit/lifecycle"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown/flush"
)

// Metrics are the go-kit metrics (any backend) that Discovery, Consumer and
// Gateway update when a *Metrics is in the container
// (fx.Supply(&fxmodule.Metrics{...})); without one, or for a nil field,
// nothing is counted. The endpoints that consumer.Consumer.Endpoint builds
// take theirs through consumer.WithRetry and consumer.WithEndpointer
// (endpoint.WithRetryReasonCounter, endpoint.WithEjectionReasonCounter...).
type Metrics struct {
	// StepDuration observes each start and stop step's duration, in
	// seconds (lifecycle.HistogramListener: labels step, phase, outcome).
	StepDuration metrics.Histogram
	// Instancer are given to every sd.Instancer the modules make (the
	// consumer's services and the FlushGateways), each metric scoped
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
	// HealthTransitions counts the instance's health changes
	// (provider.WithHealthCounter: label to = healthy or unhealthy).
	HealthTransitions metrics.Counter
	// SnapshotAge and SnapshotWriteFailures are the consumer's snapshot
	// figures with Config.SnapshotDir (consumer.SnapshotMetrics), scoped
	// With("service", <name>): declare a "service" label.
	SnapshotAge           metrics.Gauge
	SnapshotWriteFailures metrics.Counter
}

// instancerOptions scopes the Instancer metrics to service; it is the
// consumer's consumer.WithInstancerMetrics function.
func (m *Metrics) instancerOptions(service string) []sd.InstancerOption {
	if m == nil || m.Instancer == (sd.InstancerMetrics{}) {
		return nil
	}
	im := m.Instancer
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

// providerOptions are the provider's metric options.
func (m *Metrics) providerOptions() []provider.Option {
	if m == nil {
		return nil
	}
	var opts []provider.Option
	if m.StepDuration != nil {
		opts = append(opts, provider.WithLifecycleOptions(lifecycle.WithListener(lifecycle.HistogramListener(m.StepDuration))))
	}
	if m.FlushCalls != nil {
		opts = append(opts, provider.WithNotifierOptions(flush.CallCounter(m.FlushCalls)))
	}
	if m.HealthTransitions != nil {
		opts = append(opts, provider.WithHealthCounter(m.HealthTransitions))
	}
	return opts
}

// handlerOptions are the flush handler's metric options.
func (m *Metrics) handlerOptions() []flush.HandlerOption {
	if m == nil {
		return nil
	}
	var opts []flush.HandlerOption
	if m.FlushRefusals != nil {
		opts = append(opts, flush.RefusalCounter(m.FlushRefusals))
	}
	if m.FlushResults != nil {
		opts = append(opts, flush.ResultCounter(m.FlushResults))
	}
	return opts
}
