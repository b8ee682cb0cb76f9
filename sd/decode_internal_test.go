package sd

import (
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"
)

// An Instancer's decode of a Curator node (path, address and pub in one
// string) gives what decodeCurator, the path and HostPort give apart: for
// IPv4 and IPv6, an SSL port alone, and a path too long for the stack.
func TestDecodeSharesOneStringAndMeansTheSame(t *testing.T) {
	for _, tc := range []struct {
		dir string
		in  Instance
	}{
		{"/services/svc", Instance{Address: "10.1.2.3", Port: 8080}},
		{"/services/svc", Instance{Address: "fd00::1", Port: 443}},
		{"/services/svc", Instance{Address: "10.1.2.3", SSLPort: 8443}},
		{"/services/svc", Instance{Address: "host.example", Port: 80, SSLPort: 443}},
		{"/" + strings.Repeat("deep/", 40) + "svc", Instance{Address: strings.Repeat("a", 70) + ".example", Port: 1}},
	} {
		tc.in.Name, tc.in.ID = "svc", "0f1e2d3c-id"
		tc.in.Metadata = map[string]string{MetadataStatus: "UP"}
		data, err := CuratorCodec{}.Encode(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		in := &Instancer{service: "svc", dir: tc.dir}
		in.opts.codec = CuratorCodec{}
		e := in.decode(tc.in.ID, data, &zk.Stat{Czxid: 7, Version: 2})
		want, err := decodeCurator("svc", tc.in.ID, data, false, nil)
		if err != nil || !e.ok {
			t.Fatalf("%+v: decoded %+v, %v", tc.in, e, err)
		}
		if e.inst.Address != want.Address || e.inst.Path != tc.dir+"/"+tc.in.ID || e.pub != want.HostPort() {
			t.Errorf("%+v: address %q path %q pub %q; want %q, %q, %q", tc.in,
				e.inst.Address, e.inst.Path, e.pub, want.Address, tc.dir+"/"+tc.in.ID, want.HostPort())
		}
		if e.inst.Czxid != 7 || e.inst.Version != 2 || e.inst.Port != want.Port || e.inst.SSLPort != want.SSLPort || e.inst.Status() != StatusUp {
			t.Errorf("%+v: decoded %+v", tc.in, e.inst)
		}
		if e.key != keyOf(e.pub) {
			t.Errorf("%+v: key %x, want %x", tc.in, e.key, keyOf(e.pub))
		}
	}
}
