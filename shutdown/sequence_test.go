package shutdown_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/lifecycle"
	"github.com/gracekit/gracekit/shutdown"
	"github.com/gracekit/gracekit/shutdown/flush"
)

// provider is a real HTTP provider driven by a Sequence.
type provider struct {
	seq       *shutdown.Sequence
	reg       *fakeRegistrar
	tracker   *shutdown.Tracker
	server    *http.Server
	closed    atomic.Bool // the session was closed
	mu        sync.Mutex
	events    []lifecycle.Event
	onEvent   func(lifecycle.Event)
	mux       *http.ServeMux
	readiness *shutdown.Readiness
}

// newProvider builds a provider; edit may change the config.
func newProvider(t *testing.T, targets []string, edit func(*shutdown.Config), opts ...lifecycle.Option) *provider {
	t.Helper()
	p := &provider{reg: &fakeRegistrar{}, tracker: &shutdown.Tracker{}, mux: http.NewServeMux(), readiness: &shutdown.Readiness{}}
	p.mux.Handle("/readyz", p.readiness.ReadyHandler())
	p.mux.Handle("/livez", p.readiness.LiveHandler())
	p.mux.HandleFunc("/hello", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") })
	p.server = &http.Server{Handler: p.tracker.Middleware(p.mux), ReadHeaderTimeout: time.Second}
	n, err := flush.NewNotifier(self, secret, flush.StaticTargets(targets...), registration,
		flush.AttemptTimeout(100*time.Millisecond), flush.RetryWait(5*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cfg := shutdown.Config{
		Registration: p.reg,
		Tracker:      p.tracker,
		Readiness:    p.readiness,
		Notifier:     n,
		Server:       p.server,
		Addr:         "127.0.0.1:0",
		ReadyCheck: func(context.Context) error {
			return nil
		},
		CloseSession: func(context.Context) error {
			p.closed.Store(true)
			return nil
		},
	}
	if edit != nil {
		edit(&cfg)
	}
	opts = append(opts, lifecycle.WithListener(func(e lifecycle.Event) {
		p.mu.Lock()
		p.events = append(p.events, e)
		f := p.onEvent
		p.mu.Unlock()
		if f != nil {
			f(e)
		}
	}))
	p.seq, err = shutdown.NewSequence(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.seq.Stop(context.Background()) })
	return p
}

func (p *provider) trace(phase lifecycle.Phase) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, e := range p.events {
		if e.Phase != phase {
			continue
		}
		s := e.Step
		switch {
		case e.Skipped:
			s += "-"
		case e.Err != nil:
			s += "!"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func (p *provider) get(t *testing.T, path string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+p.seq.Addr().String()+path, nil)
	return testutil.Do(t, req)
}

const stopOrder = "readiness status registration flush quiesce serve listen session"

func TestSequenceStopsAnIdleProviderWithTwoAckingGateways(t *testing.T) {
	gw1, ev1 := newGateway(t)
	gw2, ev2 := newGateway(t)
	p := newProvider(t, []string{gw1.URL + "/flush", gw2.URL + "/flush"}, nil)
	var readyzAtStop int
	p.onEvent = func(e lifecycle.Event) {
		if e.Phase == lifecycle.PhaseStop && e.Step == shutdown.StepReadiness {
			readyzAtStop = p.get(t, "/readyz").StatusCode
		}
	}

	if err := p.seq.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if got := p.trace(lifecycle.PhaseStart); got != "listen serve ready-check registration readiness" {
		t.Errorf("start order: %s", got)
	}
	if code := p.get(t, "/readyz").StatusCode; code != http.StatusOK {
		t.Errorf("/readyz after start = %d, want 200", code)
	}

	begin := time.Now()
	if err := p.seq.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("stop of an idle provider with two acking gateways took %s", time.Since(begin))

	if got := p.trace(lifecycle.PhaseStop); got != stopOrder {
		t.Errorf("stop order:\n got  %s\n want %s", got, stopOrder)
	}
	if readyzAtStop != http.StatusServiceUnavailable {
		t.Errorf("/readyz from the first stop step = %d, want 503", readyzAtStop)
	}
	if got := strings.Join(p.reg.log(), ", "); got != "register, status OUT_OF_SERVICE, deregister" {
		t.Errorf("registrar calls: %s", got)
	}
	if !p.closed.Load() {
		t.Error("the session was not closed")
	}
	if ev1.count() != 1 || ev2.count() != 1 {
		t.Errorf("evictions: %d, %d; want 1 each", ev1.count(), ev2.count())
	}
	r := p.seq.Report()
	if len(r.Flush) != 2 || !r.Flush[0].Acked || !r.Flush[1].Acked || !r.Quiesced || r.Err != nil {
		t.Errorf("report: %+v", r)
	}
	if len(r.Steps) != 8 {
		t.Errorf("report has %d steps, want 8", len(r.Steps))
	}
	for _, s := range r.Steps {
		t.Logf("  %-12s %s", s.Step, s.Duration)
	}
	if err := p.seq.Stop(context.Background()); err != nil {
		t.Errorf("a second Stop = %v", err)
	}
}

func TestSequenceStopFailuresNeverSkipDeregisterAndClose(t *testing.T) {
	tests := []struct {
		name    string
		give    func(*fakeRegistrar, *shutdown.Config)
		stopCtx time.Duration
		want    string
	}{
		{
			name: "a failing middle step does not skip the steps after it",
			give: func(r *fakeRegistrar, _ *shutdown.Config) {
				r.fail = map[string]error{"status OUT_OF_SERVICE": errors.New("zk: connection closed")}
			},
			want: "readiness status! registration flush quiesce serve listen session",
		},
		{
			name: "a middle step that times out does not skip the steps after it",
			give: func(r *fakeRegistrar, c *shutdown.Config) {
				r.hang = map[string]bool{"status OUT_OF_SERVICE": true}
				c.OutOfServiceTimeout = 50 * time.Millisecond
			},
			want: "readiness status! registration flush quiesce serve listen session",
		},
		{
			name: "a stop context that expires in a middle step still deregisters, drains and closes",
			give: func(r *fakeRegistrar, c *shutdown.Config) {
				r.hang = map[string]bool{"status OUT_OF_SERVICE": true}
			},
			stopCtx: 50 * time.Millisecond,
			// The 50 ms are reserved for the steps that always run, so
			// the status step is skipped rather than run into the deadline.
			want: "readiness status- registration flush- quiesce- serve listen- session",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gw, _ := newGateway(t)
			var reg *fakeRegistrar
			p := newProvider(t, []string{gw.URL}, func(c *shutdown.Config) {
				reg = c.Registration.(*fakeRegistrar)
				c.QuietWindow = 10 * time.Millisecond
				tt.give(reg, c)
			})
			if err := p.seq.Start(context.Background()); err != nil {
				t.Fatalf("Start: %v", err)
			}
			ctx := context.Background()
			if tt.stopCtx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.stopCtx)
				defer cancel()
			}
			err := p.seq.Stop(ctx)
			var serr *lifecycle.StepError
			if !errors.As(err, &serr) || serr.Step != shutdown.StepStatus {
				t.Errorf("Stop = %v, want a *StepError for %s", err, shutdown.StepStatus)
			}
			if got := p.trace(lifecycle.PhaseStop); got != tt.want {
				t.Errorf("stop order:\n got  %s\n want %s", got, tt.want)
			}
			if log := p.reg.log(); log[len(log)-1] != "deregister" {
				t.Errorf("registrar calls %v, want deregister last", log)
			}
			if !p.closed.Load() {
				t.Error("the session was not closed")
			}
		})
	}
}

func TestSequenceStopWithAGatewayDownOrSlow(t *testing.T) {
	tests := []struct {
		name string
		give func(testing.TB) string
	}{
		{name: "a gateway that is down is named in the report", give: testutil.DownURL},
		{name: "a slow gateway is named in the report", give: func(tb testing.TB) string { return testutil.SlowServer(tb).URL + "/flush" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const budget = 3 * time.Second
			ok, _ := newGateway(t)
			bad := tt.give(t)
			p := newProvider(t, []string{ok.URL + "/flush", bad}, func(c *shutdown.Config) {
				c.FlushTimeout = 400 * time.Millisecond
				c.QuietWindow = 20 * time.Millisecond
				c.MaxQuiesce = 200 * time.Millisecond
				c.DrainTimeout = 500 * time.Millisecond
				c.OutOfServiceTimeout = 200 * time.Millisecond
				c.DeregisterTimeout = 200 * time.Millisecond
				c.CloseTimeout = 200 * time.Millisecond
			}, lifecycle.StopBudget(budget))
			if err := p.seq.Start(context.Background()); err != nil {
				t.Fatalf("Start: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			begin := time.Now()
			err := p.seq.Stop(ctx)
			took := time.Since(begin)
			if took > budget {
				t.Errorf("Stop took %s, over its budget %s", took, budget)
			}
			var ferr *flush.TargetError
			if !errors.As(err, &ferr) || ferr.Target != bad {
				t.Errorf("Stop = %v, want a *TargetError naming %s", err, bad)
			}
			r := p.seq.Report()
			if len(r.Flush) != 2 || !r.Flush[0].Acked || r.Flush[1].Acked || r.Flush[1].Target != bad {
				t.Errorf("flush reports: %+v", r.Flush)
			}
			if r.Quiesced {
				t.Error("quiesce ended on its condition with a target that did not ack")
			}
			if got := p.trace(lifecycle.PhaseStop); got != "readiness status registration flush! quiesce serve listen session" {
				t.Errorf("stop order: %s", got)
			}
			if !p.closed.Load() {
				t.Error("the session was not closed")
			}
			t.Logf("stop took %s; %+v", took, r.Flush[1])
		})
	}
}

func TestSequenceReportsRequestsAfterDeregistrationAndInFlight(t *testing.T) {
	gw, _ := newGateway(t)
	p := newProvider(t, []string{gw.URL}, func(c *shutdown.Config) { c.QuietWindow = 20 * time.Millisecond })
	release := make(chan struct{})
	p.server.RegisterOnShutdown(func() { close(release) }) // once the drain began
	entered := make(chan struct{})
	p.mux.HandleFunc("/slow", func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "done")
	})
	p.onEvent = func(e lifecycle.Event) {
		if e.Phase == lifecycle.PhaseStop && e.Step == shutdown.StepRegistration {
			p.get(t, "/hello") // a late request routed before the gateways knew
		}
	}
	if err := p.seq.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	slow := getAsync(t, "http://"+p.seq.Addr().String()+"/slow")
	<-entered
	if err := p.seq.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	resp := <-slow
	if resp == nil || resp.StatusCode != http.StatusOK || resp.Header.Get(endpoint.ClosingHeader) != endpoint.ClosingValue {
		t.Fatalf("the request in flight got %+v, want 200 with the closing header", resp)
	}
	r := p.seq.Report()
	if r.AfterDeregistration != 1 || r.InFlightAtDrain != 1 {
		t.Errorf("after deregistration = %d, in flight at drain = %d; want 1, 1", r.AfterDeregistration, r.InFlightAtDrain)
	}
}

func TestSequenceStartFailureUndoesWhatStarted(t *testing.T) {
	p := newProvider(t, nil, func(c *shutdown.Config) {
		c.Registration.(*fakeRegistrar).fail = map[string]error{"register": errors.New("zk: not authenticated")}
	})
	err := p.seq.Start(context.Background())
	var serr *lifecycle.StepError
	if !errors.As(err, &serr) || serr.Step != shutdown.StepRegistration {
		t.Fatalf("Start = %v, want a *StepError for %s", err, shutdown.StepRegistration)
	}
	if got := p.trace(lifecycle.PhaseStart); got != "listen serve ready-check registration!" {
		t.Errorf("start order: %s", got)
	}
	if got := p.trace(lifecycle.PhaseStop); got != "flush quiesce serve listen session" {
		t.Errorf("rollback order: %s", got)
	}
	if p.readiness.Ready() {
		t.Error("ready after a failed start")
	}
	if got := strings.Join(p.reg.log(), ", "); got != "register" {
		t.Errorf("registrar calls: %s", got)
	}
}

func TestNewSequenceRejectsAPlanThatCannotFit(t *testing.T) {
	_, err := shutdown.NewSequence(shutdown.Config{
		Registration: &fakeRegistrar{},
		Tracker:      &shutdown.Tracker{},
		DrainTimeout: 20 * time.Second,
	})
	var berr *lifecycle.BudgetError
	if !errors.As(err, &berr) || berr.Budget != lifecycle.DefaultStopBudget {
		t.Fatalf("NewSequence = %v, want a *lifecycle.BudgetError", err)
	}
	t.Log(err)
}

func TestNewSequenceRejectsInvalidConfig(t *testing.T) {
	tests := []struct {
		name  string
		give  shutdown.Config
		wantE string
	}{
		{"a config without a registration", shutdown.Config{Tracker: &shutdown.Tracker{}}, "shutdown: config needs a Registration"},
		{"a config without a tracker", shutdown.Config{Registration: &fakeRegistrar{}}, "shutdown: config needs a Tracker"},
		{"a negative timeout", shutdown.Config{Registration: &fakeRegistrar{}, Tracker: &shutdown.Tracker{}, FlushTimeout: -1}, "shutdown: invalid FlushTimeout -1ns (must not be negative)"},
		{"a quiet window longer than the quiesce", shutdown.Config{Registration: &fakeRegistrar{}, Tracker: &shutdown.Tracker{}, QuietWindow: 3 * time.Second}, "shutdown: QuietWindow 3s exceeds MaxQuiesce 2s"},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is rejected", func(t *testing.T) {
			if _, err := shutdown.NewSequence(tt.give); err == nil || err.Error() != tt.wantE {
				t.Errorf("got %v, want %q", err, tt.wantE)
			}
		})
	}
}

// A client's spare connection that never sent a request does not hold the
// drain: Go's Shutdown counts such a connection idle only after 5 s, longer
// than this drain's bound.
func TestSequenceDrainDoesNotWaitForAConnectionWithoutRequests(t *testing.T) {
	p := newProvider(t, nil, func(c *shutdown.Config) {
		c.DrainTimeout = 3 * time.Second
		c.Server.(*http.Server).ReadHeaderTimeout = time.Minute // the spare connection is not cut by the server itself
	})
	if err := p.seq.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", p.seq.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The server has accepted it once a request on another connection is served.
	if resp := p.get(t, "/hello"); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if err := p.seq.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if got := p.trace(lifecycle.PhaseStop); got != stopOrder {
		t.Fatalf("stop trace %q, want %q", got, stopOrder)
	}
}
