package sd_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gracekit/gracekit/sd"
)

// FuzzCuratorCodec decodes arbitrary node data as Curator JSON: Decode
// never panics, refuses with a *MalformedError, and what decodes encodes
// to bytes that decode to the same instance and encode to the same bytes.
func FuzzCuratorCodec(f *testing.F) {
	files, _ := filepath.Glob("testdata/curator/*.json")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{``, `{}`, `null`, `[]`, `{"name":"x","id":"y","address":"h","port":1}`,
		`{"name":"x","id":"y","address":"h","port":70000}`, `{"address":"h","port":1,"sslPort":2,"payload":null}`,
		`{"address":"h","port":1,"uriSpec":{"parts":[{"value":"{scheme}","variable":true}]}}`,
		`{"address":"h","port":1,"payload":{"@class":"x","metadata":{"instance_status":"OUT_OF_SERVICE"}},"extra":[1,2]}`} {
		f.Add([]byte(s))
	}
	codec := sd.CuratorCodec{}
	f.Fuzz(func(t *testing.T, data []byte) {
		inst, err := codec.Decode("svc", "child", data)
		if err != nil {
			var me *sd.MalformedError
			if !errors.As(err, &me) {
				t.Fatalf("Decode error %T %v is not a *MalformedError", err, err)
			}
			return
		}
		enc1, err := codec.Encode(inst)
		if err != nil {
			return // decodes but cannot be written back (a port out of range, say): a reader's concern only
		}
		again, err := codec.Decode("svc", "child", enc1)
		if err != nil {
			t.Fatalf("re-decoding our own encoding failed: %v\n%s", err, enc1)
		}
		enc2, err := codec.Encode(again)
		if err != nil {
			t.Fatalf("re-encoding failed: %v", err)
		}
		if !bytes.Equal(enc1, enc2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", enc1, enc2)
		}
		if inst.HostPort() != again.HostPort() || inst.Status() != again.Status() || inst.ID != again.ID ||
			!reflect.DeepEqual(inst.Metadata, again.Metadata) {
			t.Fatalf("round trip changed the instance: %+v -> %+v", inst, again)
		}
	})
}

// FuzzPlainCodec decodes arbitrary child names as plain host:port nodes.
func FuzzPlainCodec(f *testing.F) {
	for _, s := range []string{"127.0.0.1:8080", "[::1]:80", "host:0", "host", ":", "a:b:c", "host:65536", "h:1\x00", "0:0:0:0:0:0:0:1:4083", "fe80::1%eth0:80", "::1"} {
		f.Add(s)
	}
	codec := sd.PlainCodec{}
	f.Fuzz(func(t *testing.T, child string) {
		inst, err := codec.Decode("svc", child, nil)
		if err != nil {
			return
		}
		name := codec.NodeName(inst)
		again, err := codec.Decode("svc", name, nil)
		if err != nil {
			t.Fatalf("the node name %q of a decoded %q does not decode: %v", name, child, err)
		}
		if again.HostPort() != inst.HostPort() || codec.NodeName(again) != name {
			t.Fatalf("round trip: %q -> %q -> %q", child, name, codec.NodeName(again))
		}
	})
}

// FuzzParseConnectString: never panics, refuses with a *ConfigError, and
// what parses is a non-empty list of host:port with ports 1 to 65535 and a
// clean chroot; parsing the servers again gives the same.
func FuzzParseConnectString(f *testing.F) {
	for _, s := range []string{"zk1:2181", "zk1:2181,zk2:2182/apps/prod", "[::1]:2181", "::::", "", ",", "/", "h:0", "h/..", "h:2181/a//b", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		servers, chroot, err := sd.ParseConnectString(s)
		if err != nil {
			var ce *sd.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T %v is not a *ConfigError", err, err)
			}
			return
		}
		if len(servers) == 0 {
			t.Fatal("no servers and no error")
		}
		if chroot != "" && (!strings.HasPrefix(chroot, "/") || strings.HasSuffix(chroot, "/") || strings.Contains(chroot, "//")) {
			t.Fatalf("chroot %q", chroot)
		}
		again, chroot2, err := sd.ParseConnectString(strings.Join(servers, ",") + chroot)
		if err != nil || !reflect.DeepEqual(again, servers) || chroot2 != chroot {
			t.Fatalf("%q parsed to %v %q, which parses to %v %q (%v)", s, servers, chroot, again, chroot2, err)
		}
	})
}
