package grpcresolver

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/attributes"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/resolver"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/sd"
)

// stubSubConn stands in for a ready SubConn; picks are counted by name.
type stubSubConn struct {
	balancer.SubConn
	name string
}

type manualClock struct{ t time.Time }

func (c *manualClock) now() time.Time { return c.t }

func addrOf(name string, registered time.Time, meta map[string]string) resolver.Address {
	inst := sd.Instance{Name: "quote", ID: name, Address: "127.0.0.1", Port: 1, RegistrationTime: registered, Metadata: meta}
	return resolver.Address{Addr: name, Attributes: attributes.New(instanceKey{}, instanceValue{inst})}
}

// picksOf counts n picks of p by stand-in.
func picksOf(t *testing.T, p balancer.Picker, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		r, err := p.Pick(balancer.PickInfo{})
		if err != nil {
			t.Fatal(err)
		}
		got[r.SubConn.(*stubSubConn).name]++
	}
	return got
}

func TestSlowStartPickerRampsOnlyAddressesThatJoin(t *testing.T) {
	clk := &manualClock{t: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}
	pb := &pickerBuilder{s: defaultSlowStart(), seen: map[string]time.Time{}, now: clk.now}
	pb.s.Window = 10 * time.Second
	defer pb.close()
	// a and b registered a second ago, in the first update: full weight.
	a, b := addrOf("a", clk.t.Add(-time.Second), nil), addrOf("b", clk.t.Add(-time.Second), nil)
	pb.update(balancer.ClientConnState{ResolverState: resolver.State{Addresses: []resolver.Address{a, b}}})
	scs := map[string]*stubSubConn{"a": {name: "a"}, "b": {name: "b"}, "c": {name: "c"}}
	info := base.PickerBuildInfo{ReadySCs: map[balancer.SubConn]base.SubConnInfo{scs["a"]: {Address: a}, scs["b"]: {Address: b}}}
	if got := picksOf(t, pb.Build(info), 1000); got["a"] != 500 || got["b"] != 500 {
		t.Fatalf("first update's picks %v, want 500 each", got)
	}
	// c joins, registered now.
	c := addrOf("c", clk.t, nil)
	pb.update(balancer.ClientConnState{ResolverState: resolver.State{Addresses: []resolver.Address{a, b, c}}})
	info.ReadySCs[scs["c"]] = base.SubConnInfo{Address: c}
	p := pb.Build(info).(*picker)
	// The test moves the clock and reweighs itself: the ramp goroutine,
	// which owns the weights after Build, is stopped first (run beside
	// it, the two raced on p.from under make stress).
	p.stop()
	const n = 21000
	var shares []float64
	for _, step := range []time.Duration{0, 5 * time.Second, 5 * time.Second} {
		clk.t = clk.t.Add(step)
		p.reweigh()
		shares = append(shares, float64(picksOf(t, p, n)["c"])/n)
	}
	want := []float64{0.1 / 2.1, 0.5 / 2.5, 1.0 / 3}
	for i := range want {
		if math.Abs(shares[i]-want[i]) > 0.01 {
			t.Fatalf("c's shares %.3f, want %.3f", shares, want)
		}
	}
	if p.table.Load() != nil {
		t.Fatal("past the window the weights are still unequal")
	}
}

func TestSlowStartPickerHonoursMetadataWeightAndSkew(t *testing.T) {
	clk := &manualClock{t: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}
	pb := &pickerBuilder{s: defaultSlowStart(), seen: map[string]time.Time{}, now: clk.now}
	defer pb.close()
	a := addrOf("a", clk.t.Add(-time.Hour), map[string]string{endpoint.MetadataWeight: "3"})
	pb.update(balancer.ClientConnState{ResolverState: resolver.State{Addresses: []resolver.Address{a}}})
	// b registered "in a minute" by a clock ahead of ours: it starts at 0.1.
	b := addrOf("b", clk.t.Add(time.Minute), nil)
	pb.update(balancer.ClientConnState{ResolverState: resolver.State{Addresses: []resolver.Address{a, b}}})
	sa, sb := &stubSubConn{name: "a"}, &stubSubConn{name: "b"}
	p := pb.Build(base.PickerBuildInfo{ReadySCs: map[balancer.SubConn]base.SubConnInfo{sa: {Address: a}, sb: {Address: b}}})
	got := picksOf(t, p, 31000)
	// 3 against 0.1: b gets 1,000 of 31,000.
	if got["b"] < 900 || got["b"] > 1100 {
		t.Fatalf("picks %v, want b near 1000", got)
	}
	if n := testing.AllocsPerRun(1000, func() { _, _ = p.Pick(balancer.PickInfo{}) }); n != 0 {
		t.Fatalf("Pick allocates %v times", n)
	}
}

// grpc-go rebuilds the picker whenever any SubConn changes state. A
// registration "in a minute" (a provider's clock ahead of ours) ramps from
// when the balancer first saw it, so the rebuilds do not restart its ramp:
// 20 s after joining a 10 s window it has its full share.
func TestSlowStartPickerRebuildsDoNotRestartAFutureRegistrationsRamp(t *testing.T) {
	clk := &manualClock{t: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}
	pb := &pickerBuilder{s: defaultSlowStart(), seen: map[string]time.Time{}, now: clk.now}
	pb.s.Window = 10 * time.Second
	defer pb.close()
	a := addrOf("a", clk.t.Add(-time.Hour), nil)
	pb.update(balancer.ClientConnState{ResolverState: resolver.State{Addresses: []resolver.Address{a}}})
	b := addrOf("b", clk.t.Add(time.Minute), nil)
	pb.update(balancer.ClientConnState{ResolverState: resolver.State{Addresses: []resolver.Address{a, b}}})
	sa, sb := &stubSubConn{name: "a"}, &stubSubConn{name: "b"}
	info := base.PickerBuildInfo{ReadySCs: map[balancer.SubConn]base.SubConnInfo{sa: {Address: a}, sb: {Address: b}}}
	var p balancer.Picker
	for range 4 { // a SubConn changed state every 5 s
		clk.t = clk.t.Add(5 * time.Second)
		p = pb.Build(info)
	}
	const n = 22000
	if got := picksOf(t, p, n); got["b"] != n/2 {
		t.Fatalf("20 s after joining a 10 s window, through 4 picker rebuilds, b got %d of %d picks, want %d (its full share)", got["b"], n, n/2)
	}
}

// A provider restarted on its address under a new id while its old node
// lives on: the resolver lists both registrations, and grpc-go gives each
// a SubConn to the same server. The server ramps by the newest
// registration; the old one adds no full share beside it.
func TestSlowStartPickerRampsARestartOnTheSameAddress(t *testing.T) {
	clk := &manualClock{t: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}
	pb := &pickerBuilder{s: defaultSlowStart(), seen: map[string]time.Time{}, now: clk.now}
	pb.s.Window = 10 * time.Second
	defer pb.close()
	reg := func(id string, czxid int64, at time.Time) resolver.Address {
		inst := sd.Instance{Name: "quote", ID: id, Address: "127.0.0.1", Port: 2, Czxid: czxid, RegistrationTime: at}
		return resolver.Address{Addr: "b", Attributes: attributes.New(instanceKey{}, instanceValue{inst})}
	}
	a, b := addrOf("a", clk.t.Add(-time.Hour), nil), reg("b", 2, clk.t.Add(-time.Hour))
	pb.update(balancer.ClientConnState{ResolverState: resolver.State{Addresses: []resolver.Address{a, b}}})
	b2 := reg("b-restarted", 5, clk.t)
	pb.update(balancer.ClientConnState{ResolverState: resolver.State{Addresses: []resolver.Address{a, b, b2}}})
	sa, sb, sb2 := &stubSubConn{name: "a"}, &stubSubConn{name: "b"}, &stubSubConn{name: "b"}
	ready := map[balancer.SubConn]base.SubConnInfo{sa: {Address: a}, sb: {Address: b}}
	const n = 22000
	// b2's SubConn still connects: the server weighs 0.1 already.
	if got := picksOf(t, pb.Build(base.PickerBuildInfo{ReadySCs: ready}), n); got["b"] < 1800 || got["b"] > 2200 {
		t.Fatalf("b restarted on its address, its new SubConn not ready yet: picks %v of %d, want b near 2000 (weight 0.1)", got, n)
	}
	ready[sb2] = base.SubConnInfo{Address: b2}
	if got := picksOf(t, pb.Build(base.PickerBuildInfo{ReadySCs: ready}), n); got["b"] < 1800 || got["b"] > 2200 {
		t.Fatalf("b restarted on its address: picks %v of %d, want b near 2000 (weight 0.1)", got, n)
	}
}

// Issue 40: an explicit "aggression":0 or "minWeight":0 was replaced by
// the default while "window":"0s" was refused. A field given is checked as
// given: zero is out of range for all three (Envoy's aggression is above
// 0; a min weight of 0 would give a joining instance no picks at all), and
// the error names the value and the range. An absent or null field takes
// the default.
func TestSlowStartConfigChecksExplicitZeros(t *testing.T) {
	tests := []struct {
		give string
		want []string // in the error
	}{
		{give: `{"aggression":0}`, want: []string{"aggression 0", "above 0"}},
		{give: `{"minWeight":0}`, want: []string{"min weight 0", "above 0, at most 1"}},
		{give: `{"window":"0s"}`, want: []string{"window 0s", "not positive"}},
		{give: `{"window":""}`, want: []string{`window ""`, "duration"}},
		{give: `{"aggression":-1}`, want: []string{"aggression -1", "above 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.give+" is refused", func(t *testing.T) {
			got, err := slowStartBuilder{}.ParseConfig(json.RawMessage(tt.give))
			if err == nil {
				t.Fatalf("ParseConfig(%s) = %+v, nil; want an error naming the value and the allowed range", tt.give, got.(*lbConfig).s)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("ParseConfig(%s): %q does not say %q", tt.give, err, w)
				}
			}
		})
	}
	t.Run("absent and null fields take the defaults", func(t *testing.T) {
		got, err := slowStartBuilder{}.ParseConfig(json.RawMessage(`{"aggression":null,"minWeight":null}`))
		if err != nil || got.(*lbConfig).s != defaultSlowStart() {
			t.Fatalf("got %+v, %v; want the defaults", got, err)
		}
	})
}

func TestSlowStartConfig(t *testing.T) {
	tests := []struct {
		give    string
		want    endpoint.SlowStart
		wantErr string
	}{
		{give: `{}`, want: defaultSlowStart()},
		{give: `{"window":"5s","aggression":2,"minWeight":0.2}`, want: endpoint.SlowStart{Window: 5 * time.Second, Aggression: 2, MinWeight: 0.2}},
		{give: `{"window":"soon"}`, wantErr: "window"},
		{give: `{"window":"-5s"}`, wantErr: "window"},
		{give: `{"minWeight":3}`, wantErr: "min weight"},
		{give: `{"windw":"5s"}`, wantErr: "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, err := slowStartBuilder{}.ParseConfig(json.RawMessage(tt.give))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.(*lbConfig).s != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	// ServiceConfig's JSON parses back to the same ramp.
	s := endpoint.SlowStart{Window: 1500 * time.Millisecond, Aggression: 1.5, MinWeight: 0.05}
	var sc struct {
		LB []map[string]json.RawMessage `json:"loadBalancingConfig"`
	}
	if err := json.Unmarshal([]byte(ServiceConfig(s)), &sc); err != nil || len(sc.LB) != 1 {
		t.Fatalf("ServiceConfig: %s: %v", ServiceConfig(s), err)
	}
	got, err := slowStartBuilder{}.ParseConfig(sc.LB[0][BalancerName])
	if err != nil || got.(*lbConfig).s != s {
		t.Fatalf("ServiceConfig round trip: %+v, %v; want %+v", got, err, s)
	}
}
