package sd_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gracekit/gracekit/sd"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/curator/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCuratorFixturesReadFieldByField(t *testing.T) {
	tests := []struct {
		give string
		want sd.Instance
	}{
		{
			give: "spring-instance.json",
			want: sd.Instance{
				Name: "quote-service", ID: "7c0f5a2e-3d41-4a8e-9b51-2f6e1c9d8a10", Address: "10.0.0.12", Port: 8081,
				Metadata:         map[string]string{"instance_status": "UP"},
				RegistrationTime: time.UnixMilli(1796006863698).UTC(), ServiceType: "DYNAMIC",
				URISpec: "{scheme}://{address}:{port}",
			},
		},
		{
			give: "spring-instance-sslport.json",
			want: sd.Instance{
				Name: "quote-service", ID: "0b9e4c7d-8f21-4e63-a5d0-6c3b2a1f9e87", Address: "10.0.0.13", Port: 8080, SSLPort: 8443,
				Metadata:         map[string]string{"instance_status": "UP", "zone": "eu-1b"},
				RegistrationTime: time.UnixMilli(1796006863704).UTC(), ServiceType: "DYNAMIC",
				URISpec: "{scheme}://{address}:{port}",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.give+" reads back every field", func(t *testing.T) {
			got, err := sd.CuratorCodec{}.Decode("quote-service", tt.want.ID, fixture(t, tt.give))
			if err != nil {
				t.Fatal(err)
			}
			g, w := got, tt.want
			if g.Name != w.Name || g.ID != w.ID || g.Address != w.Address || g.Port != w.Port || g.SSLPort != w.SSLPort ||
				!reflect.DeepEqual(g.Metadata, w.Metadata) || !g.RegistrationTime.Equal(w.RegistrationTime) ||
				g.ServiceType != w.ServiceType || g.URISpec != w.URISpec {
				t.Fatalf("got  %+v\nwant %+v", g, w)
			}
			if g.Status() != sd.StatusUp {
				t.Fatalf("Status() = %q", g.Status())
			}
		})
	}
}

func TestCuratorEncodeMatchesTheFixtureByteForByte(t *testing.T) {
	want := fixture(t, "spring-instance.json")
	inst := sd.Instance{
		Name: "quote-service", ID: "7c0f5a2e-3d41-4a8e-9b51-2f6e1c9d8a10", Address: "10.0.0.12", Port: 8081,
		Metadata:         map[string]string{"instance_status": "UP"},
		RegistrationTime: time.UnixMilli(1796006863698),
	}
	got, err := sd.CuratorCodec{}.Encode(inst)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("encoded\n%s\nwant\n%s", got, want)
	}
	want2 := fixture(t, "spring-instance-sslport.json")
	inst2 := sd.Instance{
		Name: "quote-service", ID: "0b9e4c7d-8f21-4e63-a5d0-6c3b2a1f9e87", Address: "10.0.0.13", Port: 8080, SSLPort: 8443,
		Metadata:         map[string]string{"instance_status": "UP", "zone": "eu-1b"},
		RegistrationTime: time.UnixMilli(1796006863704),
	}
	if got, _ := (sd.CuratorCodec{}).Encode(inst2); string(got) != string(want2) {
		t.Fatalf("encoded\n%s\nwant\n%s", got, want2)
	}
}

func TestCuratorRewriteKeepsUnknownFields(t *testing.T) {
	in := `{"name":"svc","id":"a","address":"h","port":1,"sslPort":null,"enabled":true,"x-team":{"k":[1,2]},` +
		`"payload":{"@class":"` + sd.SpringInstanceClass + `","id":"a","name":"svc","metadata":{"instance_status":"UP"},"extra":"kept"},` +
		`"registrationTimeUTC":5,"serviceType":"DYNAMIC","uriSpec":{"parts":[]}}`
	inst, err := sd.CuratorCodec{}.Decode("svc", "a", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	inst.Metadata["instance_status"] = "OUT_OF_SERVICE"
	out, err := sd.CuratorCodec{}.Encode(inst)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	if m["enabled"] != true || m["x-team"] == nil {
		t.Fatalf("unknown top-level fields lost: %s", out)
	}
	p := m["payload"].(map[string]any)
	if p["extra"] != "kept" || p["@class"] != sd.SpringInstanceClass {
		t.Fatalf("payload fields lost: %s", out)
	}
	if p["metadata"].(map[string]any)["instance_status"] != "OUT_OF_SERVICE" {
		t.Fatalf("status not written: %s", out)
	}
	back, err := sd.CuratorCodec{}.Decode("svc", "a", out)
	if err != nil || back.Status() != sd.StatusOutOfService {
		t.Fatalf("re-read: %v, %v", back.Status(), err)
	}
}

func TestCuratorDecodeRefusesWhatWouldMislead(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{"empty data is refused", ``, "empty data"},
		{"text that is not JSON is refused", `10.0.0.1:80`, "not Curator JSON"},
		{"a node without address is refused", `{"name":"svc","id":"a","port":1}`, "no address"},
		{"an id that is not the node name is refused", `{"name":"svc","id":"b","address":"h","port":1}`, "not the node's name"},
		{"another service's node is refused", `{"name":"other","id":"a","address":"h","port":1}`, "not the service"},
		{"a port out of range is refused", `{"name":"svc","id":"a","address":"h","port":70000}`, "port 70000"},
		{"no port at all is refused", `{"name":"svc","id":"a","address":"h","port":null,"sslPort":null}`, "need one"},
		{"metadata that is not strings is refused", `{"name":"svc","id":"a","address":"h","port":1,"payload":{"@class":"` + sd.SpringInstanceClass + `","metadata":{"n":1}}}`, "metadata"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sd.CuratorCodec{}.Decode("svc", "a", []byte(tt.give))
			var me *sd.MalformedError
			if !errors.As(err, &me) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v; want a *MalformedError containing %q", err, tt.want)
			}
		})
	}
}

func TestCuratorDecodeAcceptsWhatCuratorAccepts(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{"no payload", `{"name":"svc","id":"a","address":"h","port":1}`},
		{"a null payload", `{"name":"svc","id":"a","address":"h","port":1,"payload":null}`},
		{"a payload of another class", `{"name":"svc","id":"a","address":"h","port":1,"payload":{"@class":"com.acme.Meta","x":1}}`},
		{"only an ssl port", `{"name":"svc","id":"a","address":"h","sslPort":443}`},
	}
	for _, tt := range tests {
		t.Run("a node with "+tt.name+" is read", func(t *testing.T) {
			inst, err := sd.CuratorCodec{}.Decode("svc", "a", []byte(tt.give))
			if err != nil {
				t.Fatal(err)
			}
			if inst.Status() != sd.StatusUp {
				t.Fatalf("Status() = %q, want UP", inst.Status())
			}
		})
	}
}

func TestInstanceURIFollowsUriSpec(t *testing.T) {
	tests := []struct {
		give sd.Instance
		want string
	}{
		{sd.Instance{Address: "10.0.0.1", Port: 80}, "http://10.0.0.1:80"},
		{sd.Instance{Address: "10.0.0.1", Port: 80, SSLPort: 443}, "https://10.0.0.1:80"},
		{sd.Instance{Address: "h", Port: 1, SSLPort: 2, URISpec: "{scheme}://{address}:{ssl-port}/x"}, "https://h:2/x"},
	}
	for _, tt := range tests {
		if got := tt.give.URI(); got != tt.want {
			t.Errorf("URI() = %q, want %q", got, tt.want)
		}
	}
}

func TestPlainCodec(t *testing.T) {
	inst, err := sd.PlainCodec{}.Decode("svc", "10.1.2.3:8080", nil)
	if err != nil || inst.HostPort() != "10.1.2.3:8080" {
		t.Fatalf("Decode = %+v, %v", inst, err)
	}
	if _, err := (sd.PlainCodec{}).Decode("svc", "no-port", nil); err == nil {
		t.Fatal("a name without a port was accepted")
	}
	if name := (sd.PlainCodec{}).NodeName(inst); name != "10.1.2.3:8080" {
		t.Fatalf("NodeName = %q", name)
	}
}

func TestPlainCodecReadsIPv6BareOrBracketed(t *testing.T) {
	tests := []struct {
		give     string
		wantHost string
		wantPort int
	}{
		{"0:0:0:0:0:0:0:1:4083", "0:0:0:0:0:0:0:1", 4083}, // ip + ":" + port, as Java tools write it
		{"[0:0:0:0:0:0:0:1]:4083", "0:0:0:0:0:0:0:1", 4083},
		{"fe80::1:80", "fe80::1", 80}, // the last colon is the port's
		{"[::1]:80", "::1", 80},
		{"::ffff:10.0.0.1:80", "::ffff:10.0.0.1", 80},
	}
	for _, tt := range tests {
		inst, err := sd.PlainCodec{}.Decode("svc", tt.give, nil)
		if err != nil || inst.Address != tt.wantHost || inst.Port != tt.wantPort || inst.ID != tt.give {
			t.Errorf("Decode(%q) = %+v, %v; want %s port %d", tt.give, inst, err, tt.wantHost, tt.wantPort)
		}
	}
	for _, give := range []string{"1.2.3.4:5:6", "::1", "a:b:80", "0:0:0:0:0:0:0:1:", "0:0:0:0:0:0:0:1:70000", "host:1:2"} {
		var me *sd.MalformedError
		if _, err := (sd.PlainCodec{}).Decode("svc", give, nil); !errors.As(err, &me) {
			t.Errorf("Decode(%q) = %v; want a *MalformedError", give, err)
		}
	}
}

func TestConnectStringIsParsedAndChecked(t *testing.T) {
	servers, chroot, err := sd.ParseConnectString("a:1,b:2,c/app/prod")
	if err != nil || chroot != "/app/prod" || strings.Join(servers, ",") != "a:1,b:2,c:2181" {
		t.Fatalf("got %v %q %v", servers, chroot, err)
	}
	bad := []string{"", ",", "a:0", "a:99999", "a:1/app/", "a:1/app//x", ":1"}
	for _, give := range bad {
		var ce *sd.ConfigError
		if _, _, err := sd.ParseConnectString(give); !errors.As(err, &ce) {
			t.Errorf("ParseConnectString(%q) = %v; want a *ConfigError", give, err)
		}
	}
}

func TestBadClientOptionsNameTheValueAndRange(t *testing.T) {
	_, err := sd.NewClient("127.0.0.1:1", sd.SessionTimeout(time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "1ms") || !strings.Contains(err.Error(), "allowed 200ms to 5m0s") {
		t.Fatalf("err = %v", err)
	}
}

// NewClient dials nothing; the first call says what is wrong.
func TestUnreachableEnsembleIsAClearError(t *testing.T) {
	cl, err := sd.NewClient("127.0.0.1:1", sd.ConnectTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatalf("NewClient did I/O: %v", err)
	}
	defer cl.Close()
	r, err := sd.NewRegistrar(cl, sd.Instance{Name: "x", ID: "x-1", Address: "127.0.0.1", Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	err = r.RegisterContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), "check the connect string") {
		t.Fatalf("err = %v", err)
	}
}

// A provider serving HTTP and gRPC on two ports registers the gRPC one in
// the metadata; PublishGRPCAddresses publishes it, for a gRPC Endpointer.
func TestPublishGRPCAddressesPublishesTheGRPCPort(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	both := instance("dual", 8080)
	both.Metadata = map[string]string{sd.MetadataGRPCPort: "9090"}
	register(t, provider, both, at)
	register(t, provider, instance("dual", 8081), at) // gRPC only: its Port is the gRPC one
	_, ch := newInstancer(t, consumer, "dual", sd.PublishGRPCAddresses(), at)
	waitSet(t, ch, "127.0.0.1:9090", "127.0.0.1:8081")
	_, plain := newInstancer(t, consumer, "dual", at)
	waitSet(t, plain, "127.0.0.1:8080", "127.0.0.1:8081")
}
