package grpcresolver

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/internal/weighted"
)

// BalancerName is the grpc-go LB policy this package registers: round
// robin over the ready addresses, weighted by endpoint's slow start rule
// and each instance's metadata weight (endpoint.MetadataWeight). Select it
// in the service config, with the ramp's parameters or none for the
// defaults (endpoint.DefaultSlowStartWindow, DefaultSlowStartAggression,
// DefaultSlowStartMinWeight):
//
//	{"loadBalancingConfig":[{"gracekit_slow_start":{"window":"30s","aggression":1,"minWeight":0.1}}]}
//
// ServiceConfig writes that JSON. An address that joins after the
// channel's first resolver update is ramped from its instance's
// registration time (from when the balancer first saw it, when it has
// none or one later than that); those of the first update are not. Only addresses that carry an
// sd.Instance (this package's resolver's) are weighed; others weigh 1.
// SubConns are health-checked when the service config asks for it, as
// with round_robin.
const BalancerName = "gracekit_slow_start"

func init() { balancer.Register(slowStartBuilder{}) }

// ServiceConfig is the service config JSON that selects BalancerName with
// the ramp s, for grpc.WithDefaultServiceConfig. It does not check s: the
// ClientConn does when it parses the config.
func ServiceConfig(s endpoint.SlowStart) string {
	w := s.Window.String()
	b, _ := json.Marshal(map[string]any{"loadBalancingConfig": []any{map[string]any{BalancerName: jsonConfig{
		Window: &w, Aggression: &s.Aggression, MinWeight: &s.MinWeight,
	}}}})
	return string(b)
}

// jsonConfig is the policy's config as JSON carries it. Pointers tell an
// absent field (the default) from an explicit zero, which is checked like
// any other value.
type jsonConfig struct {
	Window     *string  `json:"window,omitempty"`
	Aggression *float64 `json:"aggression,omitempty"`
	MinWeight  *float64 `json:"minWeight,omitempty"`
}

type lbConfig struct {
	serviceconfig.LoadBalancingConfig
	s endpoint.SlowStart
}

func defaultSlowStart() endpoint.SlowStart {
	return endpoint.SlowStart{Window: endpoint.DefaultSlowStartWindow, Aggression: endpoint.DefaultSlowStartAggression, MinWeight: endpoint.DefaultSlowStartMinWeight}
}

type slowStartBuilder struct{}

func (slowStartBuilder) Name() string { return BalancerName }

// ParseConfig implements balancer.ConfigParser: a window is a duration
// string ("30s", "500ms"); absent (or null) fields take the defaults, and
// a field given is checked as given: a window is positive, an aggression
// above 0 (Envoy's rule), a min weight above 0 and at most 1, so that an
// explicit zero is refused rather than replaced by the default.
func (slowStartBuilder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	var c jsonConfig
	d := json.NewDecoder(strings.NewReader(string(js)))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return nil, fmt.Errorf("grpcresolver: %s config %s: %w (want {\"window\":\"30s\",\"aggression\":1,\"minWeight\":0.1})", BalancerName, js, err)
	}
	s := defaultSlowStart()
	if c.Window != nil {
		w, err := time.ParseDuration(*c.Window)
		if err != nil {
			return nil, fmt.Errorf("grpcresolver: %s window %q: want a duration such as \"30s\": %w", BalancerName, *c.Window, err)
		}
		s.Window = w
	}
	if c.Aggression != nil {
		s.Aggression = *c.Aggression
	}
	if c.MinWeight != nil {
		s.MinWeight = *c.MinWeight
	}
	if err := s.Check(); err != nil {
		return nil, fmt.Errorf("grpcresolver: %s config %s: %w", BalancerName, js, err)
	}
	return &lbConfig{s: s}, nil
}

// Build implements balancer.Builder: grpc-go's base balancer (a SubConn
// per address, the picker rebuilt from the ready ones) with a picker
// builder of the channel's own, which knows the first update and when
// each address was first seen.
func (slowStartBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	pb := &pickerBuilder{s: defaultSlowStart(), seen: map[string]time.Time{}, now: time.Now}
	return &slowStartBalancer{
		Balancer: base.NewBalancerBuilder(BalancerName, pb, base.Config{HealthCheck: true}).Build(cc, opts),
		pb:       pb,
	}
}

// slowStartBalancer is the base balancer, told first of every resolver
// update. grpc-go calls a balancer from one goroutine at a time, which
// also runs the picker builder.
type slowStartBalancer struct {
	balancer.Balancer
	pb *pickerBuilder
}

func (b *slowStartBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	b.pb.update(s)
	return b.Balancer.UpdateClientConnState(s)
}

func (b *slowStartBalancer) Close() {
	b.Balancer.Close()
	b.pb.close()
}

// pickerBuilder builds the pickers of one channel, and stops the last
// one's ticker when it builds the next or the balancer closes.
type pickerBuilder struct {
	s       endpoint.SlowStart
	loaded  bool                        // the first resolver update came
	seen    map[string]time.Time        // address key → when first seen; zero: in the first update
	newest  map[string]resolver.Address // Addr → its newest registration's address
	now     func() time.Time
	current *picker
}

// czxidOf is the creation zxid of the registration behind a, 0 when a
// carries none.
func czxidOf(a resolver.Address) int64 {
	v, _ := a.Attributes.Value(instanceKey{}).(instanceValue)
	return v.inst.Czxid
}

// addrKey tells addresses apart as the instances behind them: one
// registration, one key.
func addrKey(a resolver.Address) string {
	if inst, ok := InstanceFromAddress(a); ok {
		return a.Addr + "\x00" + inst.ID + "\x00" + inst.RegistrationTime.String()
	}
	return a.Addr
}

func (pb *pickerBuilder) update(s balancer.ClientConnState) {
	if c, ok := s.BalancerConfig.(*lbConfig); ok {
		pb.s = c.s
	}
	now := pb.now()
	keep := make(map[string]time.Time, len(s.ResolverState.Addresses))
	newest := make(map[string]resolver.Address, len(s.ResolverState.Addresses))
	for _, a := range s.ResolverState.Addresses {
		if cur, ok := newest[a.Addr]; !ok || czxidOf(a) > czxidOf(cur) {
			newest[a.Addr] = a
		}
		k := addrKey(a)
		t, ok := pb.seen[k]
		switch {
		case ok:
		case pb.loaded:
			t = now
		default:
			t = time.Time{} // in the first update: not ramped
		}
		keep[k] = t
	}
	pb.seen, pb.newest, pb.loaded = keep, newest, true
}

// Build implements base.PickerBuilder.
func (pb *pickerBuilder) Build(info base.PickerBuildInfo) balancer.Picker {
	if pb.current != nil {
		pb.current.stop()
		pb.current = nil
	}
	if len(info.ReadySCs) == 0 {
		return base.NewErrPicker(balancer.ErrNoSubConnAvailable)
	}
	type ready struct {
		sc   balancer.SubConn
		addr resolver.Address
	}
	rs := make([]ready, 0, len(info.ReadySCs))
	for sc, i := range info.ReadySCs {
		rs = append(rs, ready{sc, i.Address})
	}
	// Two registrations of one address (a provider restarted on it while
	// its old node lives on) have a SubConn each, to the same server: it
	// is picked through one, weighed by the newest registration, so that
	// the restart ramps and the old registration adds no full share.
	slices.SortFunc(rs, func(a, b ready) int {
		if c := strings.Compare(a.addr.Addr, b.addr.Addr); c != 0 {
			return c
		}
		return cmp.Compare(czxidOf(b.addr), czxidOf(a.addr)) // newest first
	})
	rs = slices.CompactFunc(rs, func(a, b ready) bool { return a.addr.Addr == b.addr.Addr })
	p := &picker{s: pb.s, now: pb.now, scs: make([]balancer.SubConn, len(rs)), weight: make([]float64, len(rs)), from: make([]time.Time, len(rs))}
	now := pb.now()
	for i, r := range rs {
		p.scs[i], p.weight[i] = r.sc, 1
		reg := r.addr
		if nw, ok := pb.newest[reg.Addr]; ok {
			reg = nw // its SubConn may not be ready yet
		}
		first, known := pb.seen[addrKey(reg)]
		inst, described := InstanceFromAddress(reg)
		if described {
			if w, err := endpoint.ParseWeight(inst.Metadata[endpoint.MetadataWeight]); err == nil {
				p.weight[i] = w
			}
		}
		if !known || first.IsZero() {
			continue // in the first update (or never told): full weight
		}
		// The ramp runs from the registration, or from first sight when the
		// registration is unknown or later (a clock ahead of ours): never
		// from this build, which grpc-go redoes at every SubConn change.
		from := first
		if described && !inst.RegistrationTime.IsZero() && inst.RegistrationTime.Before(first) {
			from = inst.RegistrationTime
		}
		if now.Sub(from) < p.s.Window {
			p.from[i] = from
		}
	}
	if p.reweigh() {
		p.stopCh, p.done = make(chan struct{}), make(chan struct{})
		go p.ramp()
	}
	pb.current = p
	return p
}

func (pb *pickerBuilder) close() {
	if pb.current != nil {
		pb.current.stop()
		pb.current = nil
	}
}

// picker picks the ready SubConns in stride order by weight (round robin
// when the weights are equal); while an address ramps, a goroutine of its
// own recomputes the weights, until the builder builds the next picker.
// Pick does not allocate.
type picker struct {
	s      endpoint.SlowStart
	now    func() time.Time
	scs    []balancer.SubConn
	weight []float64   // from metadata
	from   []time.Time // ramp start; zero: full weight. Owned by the ramp goroutine after Build.
	next   atomic.Uint64
	table  atomic.Pointer[weighted.Table]
	stopCh chan struct{}
	done   chan struct{}
}

func (p *picker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	var i int
	if t := p.table.Load(); t != nil {
		i = t.Next(&p.next)
	} else {
		i = int((p.next.Add(1) - 1) % uint64(len(p.scs)))
	}
	return balancer.PickResult{SubConn: p.scs[i]}, nil
}

// reweigh stores the weights of now and reports whether an address still
// ramps.
func (p *picker) reweigh() bool {
	now := p.now()
	ws := make([]float64, len(p.scs))
	ramping := false
	for i := range ws {
		ws[i] = p.weight[i]
		if p.from[i].IsZero() {
			continue
		}
		if f := p.s.Factor(p.from[i], now); f < 1 {
			ws[i] *= f
			ramping = true
		} else {
			p.from[i] = time.Time{}
		}
	}
	p.table.Store(weighted.New(ws))
	return ramping
}

func (p *picker) ramp() {
	defer close(p.done)
	t := time.NewTicker(min(max(p.s.Window/50, 10*time.Millisecond), time.Second))
	defer t.Stop()
	for {
		select {
		case <-p.stopCh:
			return
		case <-t.C:
			if !p.reweigh() {
				return
			}
		}
	}
}

// stop ends the ramp goroutine, if any, and waits for it.
func (p *picker) stop() {
	if p.stopCh != nil {
		close(p.stopCh)
		<-p.done
		p.stopCh = nil
	}
}
