package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gracekit/gracekit/examples/internal/demometrics"
	"github.com/gracekit/gracekit/fxmodule"
)

// metrics are the gateway's Prometheus counters, labeled by route
// ("quote", "orders") and, as a constant label, by mode.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	failures *prometheus.CounterVec
	retries  *prometheus.CounterVec
	// gracekit's own metrics, through go-kit's interfaces (graceful mode).
	gracekit *fxmodule.Metrics
	endpoint *demometrics.Endpoint
}

func newMetrics(mode string) *metrics {
	labels := prometheus.Labels{"mode": mode}
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_requests_total", Help: "Requests forwarded to the upstream service.", ConstLabels: labels,
		}, []string{"route"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_failures_total", Help: "Forwarded requests that failed after retries (answered 502).", ConstLabels: labels,
		}, []string{"route"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_retries_total", Help: "Attempts beyond the first, over all forwarded requests.", ConstLabels: labels,
		}, []string{"route"}),
	}
	m.reg.MustRegister(m.requests, m.failures, m.retries,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if mode == "graceful" {
		m.gracekit = demometrics.Gracekit(m.reg)
		m.endpoint = demometrics.NewEndpoint(m.reg)
	}
	for _, r := range []string{"quote", "orders"} {
		m.requests.WithLabelValues(r)
		m.failures.WithLabelValues(r)
		m.retries.WithLabelValues(r)
	}
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
