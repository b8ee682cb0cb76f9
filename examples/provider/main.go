// Command provider is the demo's "quote" service: a go-kit HTTP service
// that registers in ZooKeeper with fxmodule.Discovery.
//
//	GET  /quote?symbol=ABC  -> {"symbol":"ABC","price":12.34,"instance":"quote-1"}
//	POST /orders {"symbol":"ABC","qty":3} -> {"order_id":"...","instance":"quote-1"}
//	/readyz, /livez
//
// Configuration is the fxmodule environment variables (GRACEKIT_*), plus
// PROVIDER_LATENCY, the per-request work time (default 50ms; each request
// takes a random time in [0.5, 1.5] times it), PROVIDER_LEDGER, a file to
// which the idempotency key of every order executed is appended as its work
// starts (header Order-Key, or Idempotency-Key; one key per line), and
// PROVIDER_METRICS_PORT, a port for GET /metrics (Prometheus), served on a
// listener of its own so that scrapes are not requests the stop sequence
// waits for, and until the process exits, and PROVIDER_HEALTH_FILE, a path
// whose existence fails the instance's health check (fxmodule.HealthCheck,
// tuned by GRACEKIT_HEALTH_*), so that a driver can make it sick.
//
// With -warmup 2s it starts cold: for 2 s after its first call, each call
// costs an extra delay that decays linearly from -warmup-delay (50ms) to
// nothing, and cold calls do that work one at a time (a cold cache's one
// loader), so a full share of calls queues where a ramped-in share does
// not (make demo's slowstart mode).
//
// Every answer names the instance id it registered with (GRACEKIT_INSTANCE_ID,
// or a random UUID when that is unset).
//
// With -transport grpc it serves the same service over gRPC only
// (examples/internal/quotegrpc: Quotes/Get and Quotes/PlaceOrder, the
// order's key in the idempotency-key metadata), on GRACEKIT_GRPC_PORT,
// registered with that port, with the standard health service that
// Discovery registers and keeps in step with the stop; no /readyz.
//
// It stops on SIGTERM or SIGINT (a second signal kills it). With -mode graceful (the default) it runs
// gracekit's whole stop sequence; with -mode naive it closes its ZooKeeper
// session (so its node goes) and exits at once, with no drain and no flush.
// Either way it prints one line to stdout as it exits (logs go to stderr):
//
//	STOPREPORT {"mode":"graceful","duration_ms":123.4,"flush_targets":2,"flush_acks":2,"after_deregistration":0,"in_flight_at_drain":1,"cut_by_drain":0}
//
// duration_ms is measured from the signal to the exit.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"google.golang.org/grpc"

	"github.com/gracekit/gracekit/examples/internal/demometrics"
	"github.com/gracekit/gracekit/fxmodule"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown"
)

// server provides the app's one server: an *http.Server, or a gRPC-only
// *grpc.Server, which Discovery serves on GRACEKIT_GRPC_PORT and registers
// with that port.
func server(transport string, svc *quoteService) fx.Option {
	if transport == "grpc" {
		return fx.Provide(func(o fxmodule.GRPCServerOptions) *grpc.Server { return newGRPCServer(o, svc) })
	}
	return fx.Provide(func() *http.Server {
		// The handler is set here: Discovery wraps it once, when it
		// builds, and listens on GRACEKIT_PORT (the server has no Addr).
		return &http.Server{Handler: newHandler(svc), ReadHeaderTimeout: 5 * time.Second}
	})
}

// ReportAck is one flush target's outcome in a STOPREPORT.
type ReportAck struct {
	Target string    `json:"target"`
	Acked  bool      `json:"acked"`
	At     time.Time `json:"at"`
}

// StopReport is the STOPREPORT line's JSON, fields in the contract's order.
type StopReport struct {
	Mode                string  `json:"mode"`
	DurationMS          float64 `json:"duration_ms"`
	FlushTargets        int     `json:"flush_targets"`
	FlushAcks           int     `json:"flush_acks"`
	AfterDeregistration int64   `json:"after_deregistration"`
	InFlightAtDrain     int     `json:"in_flight_at_drain"`
	// CutByDrain counts requests still in flight when the drain's bound
	// ended (shutdown.Report.CutByDrain): their clients got no answer.
	CutByDrain int `json:"cut_by_drain"`
	// Instance, OutAt, DeregisteredAt and Acks trace the stop for the
	// chaos suite's validators: when each step ended, on this clock
	// (upper bounds: counted back from the end of the stop).
	Instance       string      `json:"instance,omitempty"`
	OutAt          time.Time   `json:"out_at,omitzero"`
	DeregisteredAt time.Time   `json:"deregistered_at,omitzero"`
	Acks           []ReportAck `json:"acks,omitempty"`
}

func main() {
	mode := flag.String("mode", "graceful", "stop behavior: graceful or naive; gokit: registered with go-kit's sd/zk instead (HTTP only)")
	transport := flag.String("transport", "http", "what it serves: http (go-kit HTTP on GRACEKIT_PORT) or grpc (gRPC only, on GRACEKIT_GRPC_PORT)")
	warmSpan := flag.Duration("warmup", 0, "cold phase: for this long after the first call, calls cost an extra delay that decays, one call at a time (a cold cache or JIT)")
	warmPeak := flag.Duration("warmup-delay", 50*time.Millisecond, "the extra delay of the first call of the cold phase (-warmup)")
	flag.Parse()
	wu, err := newWarmup(*warmSpan, *warmPeak)
	if err != nil {
		fmt.Fprintln(os.Stderr, "provider:", err)
		os.Exit(2)
	}
	if err := run(*mode, *transport, wu); err != nil {
		fmt.Fprintln(os.Stderr, "provider:", err)
		os.Exit(1)
	}
}

func run(mode, transport string, wu *warmup) error {
	if mode != "graceful" && mode != "naive" && mode != "gokit" {
		return fmt.Errorf("invalid -mode %q (graceful, naive or gokit)", mode)
	}
	if mode == "gokit" && transport != "http" {
		return fmt.Errorf("-mode gokit serves HTTP only")
	}
	if transport != "http" && transport != "grpc" {
		return fmt.Errorf("invalid -transport %q (http or grpc)", transport)
	}
	cfg, err := fxmodule.ConfigFromEnv()
	if err != nil {
		return err
	}
	latency := 50 * time.Millisecond
	if v := os.Getenv("PROVIDER_LATENCY"); v != "" {
		if latency, err = time.ParseDuration(v); err != nil || latency < 0 {
			return fmt.Errorf("invalid PROVIDER_LATENCY %q (a Go duration such as 50ms)", v)
		}
	}
	var led *ledger
	if p := os.Getenv("PROVIDER_LEDGER"); p != "" {
		if led, err = openLedger(p); err != nil {
			return err
		}
		defer led.Close()
	}
	promReg := prometheus.NewRegistry()
	promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	met := demometrics.Gracekit(promReg)
	if v := os.Getenv("PROVIDER_METRICS_PORT"); v != "" {
		port, err := strconv.Atoi(v)
		if err != nil || port < 1 || port > 65535 {
			return fmt.Errorf("invalid PROVIDER_METRICS_PORT %q (a port from 1 to 65535)", v)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("", v))
		if err != nil {
			return err
		}
		ms := &http.Server{Handler: promhttp.HandlerFor(promReg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = ms.Serve(ln) }()
		defer ms.Close() // at exit: the last scrape may see the whole stop
	}
	stopTimeout := cfg.StopTimeout
	if stopTimeout == 0 {
		stopTimeout = fxmodule.DefaultStopTimeout
	}
	if cfg.InstanceID == "" {
		// Chosen here rather than by the module, so that the handler and
		// the logs know it before the app is built.
		cfg.InstanceID = uuid.NewString()
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).
		With("app", "provider", "mode", mode, "transport", transport, "self", cfg.InstanceID)

	// Listen for signals before starting, so an early SIGTERM is not lost.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	svc := &quoteService{instance: cfg.InstanceID, latency: latency, ledger: led, warmup: wu}
	if mode == "gokit" {
		return runGoKit(cfg, svc, log, sigs)
	}
	// PROVIDER_GOKIT_TWIN=<path>: also registered for go-kit's consumers
	// under path (the migrate scenario).
	twin := fx.Options()
	if p := os.Getenv("PROVIDER_GOKIT_TWIN"); p != "" {
		twin = fxmodule.GoKitRegistration(p)
	}

	health := fx.Options()
	if f := os.Getenv("PROVIDER_HEALTH_FILE"); f != "" {
		health = fx.Provide(func() fxmodule.HealthCheck { return fileHealth(f) })
	}

	var (
		p    *provider.Provider
		sess *sd.Session
	)
	app := fx.New(
		fx.WithLogger(func() fxevent.Logger {
			l := &fxevent.SlogLogger{Logger: log}
			l.UseLogLevel(slog.LevelDebug) // fx's wiring chatter stays below Info
			return l
		}),
		fxmodule.StopTimeout(stopTimeout), // fx's stop timeout and the module's budget at once
		fx.Supply(cfg, log, met),
		server(transport, svc),
		fxmodule.Discovery,
		twin,
		health,
		fx.Populate(&p, &sess),
	)
	startCtx, cancel := context.WithTimeout(context.Background(), fx.DefaultTimeout)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		return err
	}
	log.Info("serving", "transport", transport, "port", p.Instance().Port, "latency", latency, "instance", p.Instance().ID)

	sig := <-sigs
	signal.Stop(sigs) // a second signal kills the process
	begin := time.Now()
	log.Info("stopping", "signal", sig.String())
	rep := StopReport{Mode: mode}
	if mode == "naive" {
		// What teams have today: the session ends, the node goes, and the
		// process exits with whatever is in flight.
		client, err := sess.Client()
		if err != nil {
			return err
		}
		client.Close()
	} else {
		stopCtx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := app.Stop(stopCtx); err != nil {
			log.Error("stop", "err", err)
		}
		end := time.Now()
		r := p.Report()
		rep.Instance = p.Instance().ID
		traceStop(&rep, r, end)
		rep.FlushTargets = len(r.Flush)
		for _, f := range r.Flush {
			if f.Acked {
				rep.FlushAcks++
			}
		}
		rep.AfterDeregistration = r.AfterDeregistration
		rep.InFlightAtDrain = r.InFlightAtDrain
		rep.CutByDrain = r.CutByDrain
	}
	rep.DurationMS = math.Round(float64(time.Since(begin).Microseconds())/100) / 10
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	fmt.Printf("STOPREPORT %s\n", b)
	return nil
}

// traceStop dates the steps of r, a stop that ended by end: the steps ran
// in order, so each ended at end minus the durations of those after it.
func traceStop(rep *StopReport, r shutdown.Report, end time.Time) {
	ends := make([]time.Time, len(r.Steps))
	at := end
	for i := len(r.Steps) - 1; i >= 0; i-- {
		ends[i] = at
		at = at.Add(-r.Steps[i].Duration)
	}
	for i, st := range r.Steps {
		if st.Skipped {
			continue
		}
		switch st.Step {
		case shutdown.StepStatus:
			rep.OutAt = ends[i]
		case shutdown.StepRegistration:
			rep.DeregisteredAt = ends[i]
		case shutdown.StepFlush:
			begin := ends[i].Add(-st.Duration)
			for _, f := range r.Flush {
				rep.Acks = append(rep.Acks, ReportAck{Target: f.Target, Acked: f.Acked, At: begin.Add(f.Duration)})
			}
		}
	}
}

// fileHealth is a health check that fails while the file f exists.
func fileHealth(f string) fxmodule.HealthCheck {
	return func(context.Context) error {
		if _, err := os.Stat(f); err == nil {
			return fmt.Errorf("provider: %s exists: sick on purpose", f)
		}
		return nil
	}
}
