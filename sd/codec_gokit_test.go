package sd_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"testing"
	"time"

	kitsd "github.com/go-kit/kit/sd"
	kitzk "github.com/go-kit/kit/sd/zk"
	"github.com/go-kit/log"
	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

func zkChildren(t *testing.T, zkc *zktest.Cluster, path string) []string {
	t.Helper()
	kids, _, err := testutil.ZKConn(t, zkc.Addrs()).Children(path)
	if err != nil {
		t.Fatal(err)
	}
	return kids
}

func TestGoKitCodecDecodesInstanceStrings(t *testing.T) {
	tests := []struct {
		give                  string
		wantAddr              string
		wantPort, wantSSLPort int
	}{
		{give: "10.0.0.7:8080", wantAddr: "10.0.0.7", wantPort: 8080},
		{give: "http://10.0.0.7:8080", wantAddr: "10.0.0.7", wantPort: 8080},
		{give: "http://quote-1.svc/api", wantAddr: "quote-1.svc", wantPort: 80},
		{give: "https://quote-1.svc", wantAddr: "quote-1.svc", wantSSLPort: 443},
		{give: "[::1]:9090", wantAddr: "::1", wantPort: 9090},
		{give: "grpc://10.0.0.7:9090", wantAddr: "10.0.0.7", wantPort: 9090},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			inst, err := sd.GoKitCodec{}.Decode("quote", "_c_0123-0000000001", []byte(tt.give))
			if err != nil {
				t.Fatal(err)
			}
			if inst.Address != tt.wantAddr || inst.Port != tt.wantPort || inst.SSLPort != tt.wantSSLPort ||
				inst.ID != "_c_0123-0000000001" || inst.Name != "quote" || inst.Metadata[sd.MetadataGoKitInstance] != tt.give {
				t.Errorf("Decode(%q) = %+v", tt.give, inst)
			}
		})
	}
	for _, give := range []string{"", "quote", "10.0.0.7:0", "10.0.0.7:port", "http://", "ftp://10.0.0.7", "10.0.0.7 :80", `{"name":"quote"}`} {
		if _, err := (sd.GoKitCodec{}).Decode("quote", "_c_x", []byte(give)); !errors.As(err, new(*sd.MalformedError)) {
			t.Errorf("Decode(%q) error = %v, want a *MalformedError", give, err)
		}
	}
}

// MixedCodec reads Curator JSON as CuratorCodec does, a twin as out of
// service (in rotation with RouteTwins), and anything else as go-kit's.
func TestMixedCodecTellsTheKindsApart(t *testing.T) {
	curator, err := sd.CuratorCodec{}.Encode(sd.Instance{Name: "quote", ID: "quote-1", Address: "10.0.0.7", Port: 8080})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := sd.MixedCodec{}.Decode("quote", "quote-1", curator)
	if err != nil || inst.ID != "quote-1" || inst.Port != 8080 || inst.Status() != sd.StatusUp {
		t.Fatalf("Curator node: %+v, %v", inst, err)
	}
	twin, err := sd.MixedCodec{}.Decode("quote", sd.GoKitCodec{}.NodeName(inst), []byte("10.0.0.7:8080"))
	if err != nil || twin.Status() != sd.StatusOutOfService || twin.Metadata[sd.MetadataTwinOf] != "quote-1" {
		t.Fatalf("twin: %+v, %v; want out of service, twin of quote-1", twin, err)
	}
	routed, err := sd.MixedCodec{RouteTwins: true}.Decode("quote", sd.GoKitCodec{}.NodeName(inst), []byte("10.0.0.7:8080"))
	if err != nil || routed.Status() != sd.StatusUp || routed.Metadata[sd.MetadataTwinOf] != "quote-1" || routed.HostPort() != "10.0.0.7:8080" {
		t.Fatalf("twin with RouteTwins: %+v, %v; want in rotation, twin of quote-1", routed, err)
	}
	kit, err := sd.MixedCodec{}.Decode("quote", "_c_9b2f-0000000004", []byte("10.0.0.8:8080"))
	if err != nil || kit.Status() != sd.StatusUp || kit.Address != "10.0.0.8" {
		t.Fatalf("go-kit node: %+v, %v", kit, err)
	}
	if _, err := (sd.MixedCodec{}).Decode("quote", "quote-2", []byte(`{"name":`)); !errors.As(err, new(*sd.MalformedError)) {
		t.Fatalf("broken JSON: %v, want a *MalformedError", err)
	}
}

// waitContains reads events until one lists every string of want (and
// maybe others), or, with absent, lists none of want.
func waitContains(t *testing.T, ch <-chan kitsd.Event, absent bool, want ...string) []string {
	t.Helper()
	deadline := time.After(waitLimit)
	var last []string
	for {
		select {
		case ev := <-ch:
			last = ev.Instances
			n := 0
			for _, w := range want {
				if slices.Contains(ev.Instances, w) {
					n++
				}
			}
			if ev.Err == nil && ((!absent && n == len(want)) || (absent && n == 0)) {
				return ev.Instances
			}
		case <-deadline:
			t.Fatalf("no event with (absent=%v) %v within %v; last: %q", absent, want, waitLimit, last)
		}
	}
}

// A service in migration: two providers registered by go-kit's own sd/zk
// Registrar, one gracekit provider with its go-kit twin. A gracekit
// consumer with MixedCodec lists all three, the gracekit one once, and
// counts nothing as malformed; a stock go-kit consumer lists the twin's
// instance string beside its own; a Curator reader lists the gracekit
// provider. Deregistering the twin takes it from go-kit's consumers only.
func TestAMixedServiceIsReadByGoKitCuratorAndGracekitConsumers(t *testing.T) {
	t.Parallel()
	zkc, base := sharedZK(t)
	at := sd.BasePath(base)
	kitClient, err := kitzk.NewClient(zkc.Addrs(), log.NewNopLogger(), kitzk.EventHandler(func(zk.Event) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kitClient.Stop) // its session holds the go-kit nodes
	for _, data := range []string{"127.0.0.1:7001", "http://127.0.0.1:7002"} {
		kitzk.NewRegistrar(kitClient, kitzk.Service{Path: base, Name: "quote", Data: []byte(data)}, log.NewNopLogger()).Register()
	}

	cl := newClient(t, zkc)
	inst := instance("quote", 7003)
	register(t, cl, inst, at)
	twin := register(t, cl, inst, sd.WithCodec(sd.GoKitCodec{}), sd.ParentMode(sd.ParentsPersistent), at)

	// go-kit's Registrar writes protected ephemeral sequential nodes.
	kids := zkChildren(t, zkc, base+"/quote")
	protected := regexp.MustCompile(`^_c_[0-9a-f]{32}-\d{10}$`)
	var kitNodes int
	for _, k := range kids {
		if protected.MatchString(k) {
			kitNodes++
		}
	}
	if kitNodes != 2 || !slices.Contains(kids, "quote-7003") || !slices.Contains(kids, sd.GoKitTwinPrefix+"quote-7003") {
		t.Fatalf("children %q: want 2 go-kit nodes, quote-7003 and its twin", kids)
	}

	mixed, mixedCh := newInstancer(t, cl, "quote", sd.WithCodec(sd.MixedCodec{}), at)
	waitSet(t, mixedCh, "127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003")
	if st := mixed.Stats(); st.Malformed != 0 {
		t.Errorf("MixedCodec counted %d malformed nodes, want 0", st.Malformed)
	}

	kitCh := testutil.GoKitEvents(t, zkc.Addrs(), base+"/quote")
	waitContains(t, kitCh, false, "127.0.0.1:7001", "http://127.0.0.1:7002", "127.0.0.1:7003")

	_, curatorCh := newInstancer(t, cl, "quote", at)
	waitSet(t, curatorCh, "127.0.0.1:7003")

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := twin.DeregisterContext(ctx); err != nil {
		t.Fatal(err)
	}
	waitContains(t, kitCh, true, "127.0.0.1:7003")
	select {
	case ev := <-mixedCh:
		if !slices.Contains(ev.Instances, "127.0.0.1:7003") {
			t.Errorf("the gracekit consumer lost the provider with its twin: %q", ev.Instances)
		}
	default: // nothing it routes changed: no event needed
	}
}

// A stock Apache Curator client (Debian's 5.4.0, as Spring Cloud Zookeeper
// configures it) lists what gracekit's Registrar writes, with its status,
// through a status change; the fixtures hold what Curator itself writes.
func TestAStockCuratorClientListsOurRegistrations(t *testing.T) {
	t.Parallel()
	zkc, base := sharedZK(t)
	at := sd.BasePath(base)
	cl := newClient(t, zkc)
	inst := instance("curated", 8711)
	inst.SSLPort = 8712
	inst.Metadata = map[string]string{"zone": "a"}
	r := register(t, cl, inst, at)
	register(t, cl, instance("curated", 8713), at)
	curator := testutil.NewCurator(t, zkc.ConnectString())
	got, err := curator.List(t, base, "curated")
	slices.Sort(got)
	if want := []string{"curated-8711 127.0.0.1 8711 8712 UP", "curated-8713 127.0.0.1 8713 null UP"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("Curator's queryForInstances: %q, %v; want %q", got, err, want)
	}
	if err := r.SetStatus(ctxFor(t), sd.StatusOutOfService); err != nil {
		t.Fatal(err)
	}
	got, err = curator.List(t, base, "curated")
	slices.Sort(got)
	if want := []string{"curated-8711 127.0.0.1 8711 8712 OUT_OF_SERVICE", "curated-8713 127.0.0.1 8713 null UP"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("Curator's queryForInstances after SetStatus: %q, %v; want %q", got, err, want)
	}
}
