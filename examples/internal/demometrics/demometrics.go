// Package demometrics backs gracekit's go-kit metrics with Prometheus for
// the example binaries, through go-kit's metrics/prometheus adapter. The
// library itself only sees go-kit's metrics interfaces; any other backend
// works the same way. The README lists every metric.
package demometrics

import (
	kitprometheus "github.com/go-kit/kit/metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/sd"
)

// StepBuckets are the buckets of the step duration histogram, in seconds.
var StepBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15}

// Gracekit returns the fxmodule.Metrics of a provider or gateway, with
// their collectors registered on reg:
//
//	gracekit_lifecycle_step_duration_seconds{step,phase,outcome}  histogram
//	gracekit_sd_instances{service}                                gauge
//	gracekit_sd_watch_events_total{service}                       counter
//	gracekit_sd_malformed_nodes_total{service}                    counter
//	gracekit_sd_unreadable_nodes_total{service}                   counter
//	gracekit_sd_evictions_total{service}                          counter
//	gracekit_flush_calls_total{kind,outcome}                      counter
//	gracekit_flush_refusals_total{reason}                         counter
//	gracekit_flush_results_total{result}                          counter
//	gracekit_sd_snapshot_age_seconds{service}                     gauge
//	gracekit_sd_snapshot_write_failures_total{service}            counter
func Gracekit(reg prometheus.Registerer) *fxmodule.Metrics {
	counter := func(name, help string, labels ...string) *kitprometheus.Counter {
		cv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		reg.MustRegister(cv)
		return kitprometheus.NewCounter(cv)
	}
	steps := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gracekit_lifecycle_step_duration_seconds",
		Help:    "Duration of each lifecycle step phase (start, stop, rollback), by outcome (ok, error, skipped).",
		Buckets: StepBuckets,
	}, []string{"step", "phase", "outcome"})
	instances := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gracekit_sd_instances", Help: "Instances in the set the Instancer published last.",
	}, []string{"service"})
	snapAge := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gracekit_sd_snapshot_age_seconds", Help: "Age of the snapshot a service serves while ZooKeeper has not answered; 0 once live.",
	}, []string{"service"})
	reg.MustRegister(steps, instances, snapAge)
	return &fxmodule.Metrics{
		StepDuration: kitprometheus.NewHistogram(steps),
		Instancer: sd.InstancerMetrics{
			Instances:   kitprometheus.NewGauge(instances),
			WatchEvents: counter("gracekit_sd_watch_events_total", "ZooKeeper watch events the Instancer handled.", "service"),
			Malformed:   counter("gracekit_sd_malformed_nodes_total", "Nodes skipped as malformed (each read counts).", "service"),
			Unreadable:  counter("gracekit_sd_unreadable_nodes_total", "Nodes skipped because they could not be read (once per node).", "service"),
			Evictions:   counter("gracekit_sd_evictions_total", "Instances removed from the Instancer by a flush.", "service"),
		},
		FlushCalls:    counter("gracekit_flush_calls_total", "Flush calls of the stop, one per target: kind signed or spring, outcome acked or failed.", "kind", "outcome"),
		FlushRefusals: counter("gracekit_flush_refusals_total", "Flush requests the gateway's handler refused, by reason.", "reason"),
		FlushResults:  counter("gracekit_flush_results_total", "Flush requests the gateway's handler acknowledged, by result.", "result"),
		// Only with GRACEKIT_SNAPSHOT_DIR (docs/STATIC-STABILITY.md).
		SnapshotAge:           kitprometheus.NewGauge(snapAge),
		SnapshotWriteFailures: counter("gracekit_sd_snapshot_write_failures_total", "Snapshot writes that failed (full or read-only disk).", "service"),
	}
}

// Endpoint holds the counters of gracekit endpoints, labeled by route:
//
//	gracekit_endpoint_retries_total{route,reason}    counter
//	gracekit_endpoint_failures_total{route,reason}   counter
//	gracekit_endpoint_ejections_total{route,reason}  counter
type Endpoint struct {
	retries, failures, ejections *kitprometheus.Counter
}

// NewEndpoint registers the endpoint counters on reg.
func NewEndpoint(reg prometheus.Registerer) *Endpoint {
	vec := func(name, help string) *kitprometheus.Counter {
		cv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"route", "reason"})
		reg.MustRegister(cv)
		return kitprometheus.NewCounter(cv)
	}
	return &Endpoint{
		retries:   vec("gracekit_endpoint_retries_total", "Attempts after the first, by why the failure was retried (not-sent, retryable, attempt-timeout, retry-if)."),
		failures:  vec("gracekit_endpoint_failures_total", "Calls that failed, by why retrying stopped (attempts-exhausted, budget-exhausted, not-retryable, non-idempotent, canceled, deadline)."),
		ejections: vec("gracekit_endpoint_ejections_total", "Instances taken out of rotation, by reason (connect-failures, closing, evicted)."),
	}
}

// RetryOptions are the endpoint.NewRetry options that count route's
// retries and failures.
func (e *Endpoint) RetryOptions(route string) []endpoint.RetryOption {
	return []endpoint.RetryOption{
		endpoint.WithRetryReasonCounter(e.retries.With("route", route)),
		endpoint.WithFailureReasonCounter(e.failures.With("route", route)),
	}
}

// EndpointerOptions are the endpoint.NewEndpointer options that count
// route's ejections.
func (e *Endpoint) EndpointerOptions(route string) []endpoint.Option {
	return []endpoint.Option{endpoint.WithEjectionReasonCounter(e.ejections.With("route", route))}
}
