package sd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// referenceDecode is Decode as it was before the scanner, encoding/json
// alone. Decode must give the same answers.
func referenceDecode(service, child string, data []byte) (Instance, error) {
	bad := func(reason string, err error) (Instance, error) {
		return Instance{}, &MalformedError{Reason: reason, Err: err}
	}
	var n curatorNode
	if err := json.Unmarshal(data, &n); err != nil {
		if len(data) == 0 {
			return bad("empty data, not Curator JSON", nil)
		}
		return bad("not Curator JSON", err)
	}
	switch {
	case n.Name == nil || *n.Name == "":
		return bad("no name", nil)
	case n.ID == nil || *n.ID == "":
		return bad("no id", nil)
	case n.Address == nil || *n.Address == "":
		return bad("no address", nil)
	case *n.ID != child:
		return bad(fmt.Sprintf("id %q is not the node's name %q", *n.ID, child), nil)
	case service != "" && *n.Name != service:
		return bad(fmt.Sprintf("name %q is not the service %q", *n.Name, service), nil)
	}
	inst := Instance{Name: *n.Name, ID: *n.ID, Address: *n.Address, raw: bytes.Clone(data)}
	if n.Port != nil {
		inst.Port = *n.Port
	}
	if n.SSLPort != nil {
		inst.SSLPort = *n.SSLPort
	}
	if inst.Port < 0 || inst.Port > 65535 || inst.SSLPort < 0 || inst.SSLPort > 65535 || inst.Port+inst.SSLPort == 0 {
		return bad(fmt.Sprintf("port %d / sslPort %d (need one from 1 to 65535)", inst.Port, inst.SSLPort), nil)
	}
	if n.RegistrationTimeUTC != nil {
		inst.RegistrationTime = time.UnixMilli(*n.RegistrationTimeUTC).UTC()
	}
	if n.ServiceType != nil {
		inst.ServiceType = *n.ServiceType
	}
	if n.URISpec != nil {
		inst.URISpec = n.URISpec.String()
	}
	if p := n.Payload; p != nil && p.Class != nil && *p.Class == SpringInstanceClass && len(p.Metadata) > 0 && string(p.Metadata) != "null" {
		if err := json.Unmarshal(p.Metadata, &inst.Metadata); err != nil {
			return bad("payload.metadata is not a map of strings", err)
		}
	}
	return inst, nil
}

// scanCases are shapes where a hand-written reader easily departs from
// encoding/json; each must decode (or be refused) exactly as it does.
var scanCases = []string{
	``, ` `, `null`, `[]`, `{}`, `"x"`, `{"name":"svc"}`,
	`{"name":"svc","id":"a","address":"h","port":1}`,
	` {"name" : "svc" , "id":"a","address":"h","port":1 } `,
	`{"name":"svc","id":"a","address":"h","port":1}x`,
	`{"name":"svc","id":"a","address":"h","port":1,}`,
	`{"name":"svc","name":"other","id":"a","address":"h","port":1}`,          // duplicate: last wins
	`{"NAME":"svc","id":"a","address":"h","port":1}`,                         // case folded
	`{"name":"svc","Name":"other","id":"a","address":"h","port":1}`,          // exact and folded
	`{"na\u006de":"svc","id":"a","address":"h","port":1}`,                    // escaped key
	`{"name":"s\u0076c","id":"a","address":"h","port":1}`,                    // escaped value
	"{\"name\":\"svc\",\"id\":\"a\",\"address\":\"h\xff\",\"port\":1}",       // invalid UTF-8
	"{\"name\":\"svc\",\"id\":\"a\",\"address\":\"h\u00e9\",\"port\":1}",     // valid UTF-8
	"{\"name\":\"svc\",\"id\":\"a\",\"addre\u017fs\":\"h\",\"port\":1}",      // long s folds to s
	`{"name":"svc","id":"a","address":"h","port":1.0}`,                       // float into int
	`{"name":"svc","id":"a","address":"h","port":1e2}`,                       // exponent
	`{"name":"svc","id":"a","address":"h","port":-0}`,                        // negative zero
	`{"name":"svc","id":"a","address":"h","port":01}`,                        // leading zero
	`{"name":"svc","id":"a","address":"h","port":"80"}`,                      // string into int
	`{"name":"svc","id":"a","address":"h","port":99999999999999999999}`,      // overflow
	`{"name":"svc","id":"a","address":"h","port":-9223372036854775808}`,      // min int64
	`{"name":"svc","id":"a","address":"h","sslPort":443,"port":null}`,        // null port
	`{"name":null,"id":"a","address":"h","port":1}`,                          // null name
	`{"name":"svc","id":"a","address":"h","port":1,"registrationTimeUTC":0}`, // epoch, not unset
	`{"name":"svc","id":"a","address":"h","port":1,"registrationTimeUTC":null}`,
	`{"name":"svc","id":"a","address":"h","port":1,"registrationTimeUTC":9223372036854775807}`,
	`{"name":"svc","id":"a","address":"h","port":1,"serviceType":"STATIC"}`,
	`{"name":"svc","id":"a","address":"h","port":1,"serviceType":5}`,
	`{"name":"svc","id":"a","address":"h","port":1,"x":{"a":[1,2,{"b":"}"}]},"y":[],"z":"\"\\"}`,
	`{"name":"svc","id":"a","address":"h","port":1,"x":{"a":[1,2}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"x":tru}`,
	`{"name":"svc","id":"a","address":"h","port":1,"x":"\x"}`,
	`{"name":"svc","id":"a","address":"h","port":1,"x":"\u12"}`,
	`{"name":"svc","id":"a","address":"h","port":1,"x":1.5e+3}`,
	`{"name":"svc","id":"a","address":"h","port":1,"x":-}`,
	`{"name":"svc","id":"a","address":"h","port":1,"payload":null}`,
	`{"name":"svc","id":"a","address":"h","port":1,"payload":[]}`,
	`{"name":"svc","id":"a","address":"h","port":1,"payload":{"@class":"x","metadata":{"n":1}}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"payload":{"@class":"` + SpringInstanceClass + `","metadata":{"n":1}}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"payload":{"@class":"` + SpringInstanceClass + `","metadata":{"a":"1","a":"2"}}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"payload":{"@class":"` + SpringInstanceClass + `","metadata":{"a":null}}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"payload":{"@class":"` + SpringInstanceClass + `","metadata":{"a\n":"b"}}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"payload":{"@class":"` + SpringInstanceClass + `","metadata":{"a":"\u00e9"}}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"payload":{"@class":"` + SpringInstanceClass + `","metadata":{}}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"payload":{"@class":"` + SpringInstanceClass + `","metadata":null}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"payload":{"@class":"` + SpringInstanceClass + `","metadata":[]}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"payload":{"metadata":{"a":"b"},"@class":"` + SpringInstanceClass + `"}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"payload":{"@CLASS":"` + SpringInstanceClass + `","metadata":{"a":"b"}}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"payload":{"@class":null,"metadata":{"a":"b"}}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"payload":{"@class":"` + SpringInstanceClass + `","metadata":{"a":"b"}},"payload":{"x":1}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"uriSpec":null}`,
	`{"name":"svc","id":"a","address":"h","port":1,"uriSpec":{"parts":null}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"uriSpec":{"parts":[null,{"value":"x"},{"variable":true},{"value":null,"variable":null}]}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"uriSpec":{"parts":[{"value":"a","value":"b"}]}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"uriSpec":{"parts":[{"value":1}]}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"uriSpec":{"parts":{}}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"uriSpec":{"parts":[{"value":"a"}],"parts":[]}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"uriSpec":{"Parts":[{"value":"a"}]}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"uriSpec":{"parts":[{"value":"scheme","variable":true},{"value":"://","variable":false}],"x":1}}`,
	`{"name":"svc","id":"a","address":"h","port":1,"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	`{"name":"svc","id":"a","address":"h","port":1,"x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`,
}

func scanSeeds(tb testing.TB) [][]byte {
	var out [][]byte
	files, _ := filepath.Glob("testdata/curator/*.json")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	for _, s := range scanCases {
		out = append(out, []byte(s))
	}
	return out
}

// sameDecode fails unless Decode and the encoding/json reference agree on
// data: the same instance, or a *MalformedError with the same reason.
func sameDecode(t *testing.T, data []byte) {
	t.Helper()
	for _, child := range []string{"a", "7c0f5a2e-3d41-4a8e-9b51-2f6e1c9d8a10", "0b9e4c7d-8f21-4e63-a5d0-6c3b2a1f9e87"} {
		for _, service := range []string{"svc", "quote-service", ""} {
			got, gerr := CuratorCodec{}.Decode(service, child, data)
			want, werr := referenceDecode(service, child, data)
			var gm, wm *MalformedError
			if (gerr == nil) != (werr == nil) || (gerr != nil && (!errors.As(gerr, &gm) || !errors.As(werr, &wm) || gm.Reason != wm.Reason)) {
				t.Fatalf("Decode(%q, %q, %q):\n got err %v\nwant err %v", service, child, data, gerr, werr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Decode(%q, %q, %q):\n got %#v\nwant %#v", service, child, data, got, want)
			}
		}
	}
}

func TestCuratorScanDecodesAsEncodingJSON(t *testing.T) {
	for _, data := range scanSeeds(t) {
		sameDecode(t, data)
	}
}

// The plain shape never falls back to encoding/json: the fixtures, what
// Encode writes, and unknown fields all take the scanner's path.
func TestCuratorScanReadsThePlainShapeItself(t *testing.T) {
	seeds := scanSeeds(t)[:2]
	enc, err := CuratorCodec{}.Encode(Instance{Name: "svc", ID: "a", Address: "h", Port: 1, Metadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	seeds = append(seeds, enc, []byte(`{"name":"svc","id":"a","address":"h","port":1,"x":{"a":[1,"}",{"b":null}]}}`))
	for _, data := range seeds {
		if _, ok := scanCurator(data); !ok {
			t.Errorf("scanner gave up on %s", data)
		}
	}
}

// springShapes are the Spring nodes of the fixtures and of Encode, and
// near misses of that shape (each must give up to scanKeys, or agree).
func springShapes(tb testing.TB) [][]byte {
	out := scanSeeds(tb)[:2]
	for _, inst := range []Instance{
		{Name: "svc", ID: "a", Address: "h", Port: 1, Metadata: map[string]string{MetadataStatus: "UP"}},
		{Name: "svc", ID: "a", Address: "::1", Port: 1, SSLPort: 443, Metadata: map[string]string{"a": "1", "b": ""}},
		{Name: "svc", ID: "a", Address: "h", Port: 1, Metadata: map[string]string{}},
	} {
		enc, err := CuratorCodec{}.Encode(inst)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, enc)
	}
	b, err := os.ReadFile("testdata/curator/spring-instance.json")
	if err != nil {
		tb.Fatal(err)
	}
	fixture := string(b)
	for _, r := range [][2]string{
		{`"10.0.0.12"`, `"10.0.0.\u0031"`},   // an escape
		{`"10.0.0.12"`, "\"10.0.0.\u00e9\""}, // not ASCII
		{`"10.0.0.12"`, "\"10.0.0.\x01\""},   // a control byte
		{`"port":8081`, `"port": 8081`},      // whitespace
		{`"port":8081`, `"port":8081.0`},
		{`"port":8081`, `"port":null`},
		{`"sslPort":null`, `"sslPort":8443`},
		{`"sslPort":null`, `"sslPort":"8443"`},
		{`{"instance_status":"UP"}`, `{"instance_status":1}`},
		{`{"instance_status":"UP"}`, `{"instance_status":"UP","instance_status":"DOWN"}`},
		{`{"instance_status":"UP"}`, `{"instance_status":"UP",}`},
		{`{"instance_status":"UP"}`, `null`},
		{`"registrationTimeUTC":1796006863698`, `"registrationTimeUTC":null`},
		{`"registrationTimeUTC":1796006863698`, `"registrationTimeUTC":99999999999999999999`},
		{`"serviceType":"DYNAMIC"`, `"serviceType":"STATIC"`},
		{`"variable":true}]}}`, `"variable":true}]}} `},
		{`"variable":true}]}}`, `"variable":true}]},"x":1}`},
		{`"name":"quote-service","id"`, `"name":"quote-service","name":"x","id"`},
		{`ZookeeperInstance"`, `ZookeeperInstanceX"`},
	} {
		mutant := strings.Replace(fixture, r[0], r[1], 1)
		if mutant == fixture {
			tb.Fatalf("%q is not in the fixture", r[0])
		}
		out = append(out, []byte(mutant))
	}
	return out
}

// What Curator and Encode write takes scanSpring's path, and reads there
// as scanKeys reads it.
func TestSpringShapeIsReadLiteralByLiteral(t *testing.T) {
	for i, data := range springShapes(t)[:5] {
		got, ok := scanSpring(data)
		if !ok {
			t.Fatalf("scanSpring gave up on %s", data)
		}
		want, ok := scanKeys(data)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("shape %d: scanSpring read %+v, scanKeys %+v (%v)", i, got, want, ok)
		}
	}
	for _, data := range springShapes(t)[5:] {
		sameDecode(t, data)
	}
}

// FuzzSpringShapeMatchesScanKeys holds scanSpring to scanKeys wherever it
// answers; scanKeys is held to encoding/json by the fuzz target below.
func FuzzSpringShapeMatchesScanKeys(f *testing.F) {
	for _, s := range springShapes(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := scanSpring(data)
		if !ok {
			return
		}
		want, wok := scanKeys(data)
		if !wok || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: scanSpring read %+v, scanKeys %+v (%v)", data, got, want, wok)
		}
		sameDecode(t, data)
	})
}

// FuzzCuratorScanMatchesEncodingJSON holds the scanner to encoding/json's
// answers on any input.
func FuzzCuratorScanMatchesEncodingJSON(f *testing.F) {
	for _, s := range append(scanSeeds(f), springShapes(f)...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sameDecode(t, data)
		// The metadata reader alone, on the same bytes.
		m, ok := scanStringMap(data)
		var want map[string]string
		werr := json.Unmarshal(data, &want)
		if ok && (werr != nil || !reflect.DeepEqual(m, want)) {
			t.Fatalf("scanStringMap(%q) = %v; encoding/json: %v, %v", data, m, want, werr)
		}
	})
}

func TestInstancerReadKeepsNoBytesUnlessAsked(t *testing.T) {
	data := scanSeeds(t)[1]
	var shared metaCache
	a, err := readNode(CuratorCodec{}, "quote-service", "7c0f5a2e-3d41-4a8e-9b51-2f6e1c9d8a10", data, false, &shared)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := readNode(CuratorCodec{}, "quote-service", "7c0f5a2e-3d41-4a8e-9b51-2f6e1c9d8a10", data, false, &shared)
	if a.raw != nil {
		t.Fatal("the node's bytes were kept")
	}
	if reflect.ValueOf(a.Metadata).UnsafePointer() != reflect.ValueOf(b.Metadata).UnsafePointer() {
		t.Fatal("equal metadata is not shared")
	}
	k, _ := readNode(CuratorCodec{}, "quote-service", "7c0f5a2e-3d41-4a8e-9b51-2f6e1c9d8a10", data, true, &shared)
	if !bytes.Equal(k.raw, data) {
		t.Fatal("keep did not keep the node's bytes")
	}
}

// springURISpec is what Encode writes for DefaultURISpec, so the shortcut
// for it is taken for the nodes gracekit and Spring write.
func TestSpringURISpecIsWhatEncodeWrites(t *testing.T) {
	out, err := CuratorCodec{}.Encode(Instance{Name: "svc", ID: "a", Address: "h", Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte(`"uriSpec":`+string(springURISpec))) {
		t.Fatalf("%s does not hold %s", out, springURISpec)
	}
}

// retainingCodec keeps the bytes it decodes, as a Codec of a user's own may.
type retainingCodec struct{ kept *[]byte }

func (retainingCodec) NodeName(inst Instance) string        { return inst.ID }
func (retainingCodec) Encode(inst Instance) ([]byte, error) { return nil, nil }
func (c retainingCodec) Decode(service, child string, data []byte) (Instance, error) {
	*c.kept = data
	return Instance{Name: service, ID: child, Address: "h", Port: 1}, nil
}

// A user's Codec gets a copy: what it keeps must not pin a bulk read's
// reply frame, nor change under it.
func TestInstancerReadGivesAUserCodecACopy(t *testing.T) {
	var kept []byte
	frame := []byte("node bytes in a larger frame")
	data := frame[:10]
	if _, err := readNode(retainingCodec{&kept}, "svc", "a", data, false, nil); err != nil {
		t.Fatal(err)
	}
	if string(kept) != "node bytes" || &kept[0] == &data[0] {
		t.Fatalf("the codec was handed the caller's buffer (%q)", kept)
	}
}

// overridingCodec embeds CuratorCodec and overrides Decode: the Instancer
// must call its Decode, not read around it.
type overridingCodec struct{ CuratorCodec }

func (overridingCodec) Decode(service, child string, data []byte) (Instance, error) {
	return Instance{Name: service, ID: child, Address: "overridden", Port: 1}, nil
}

func TestInstancerReadHonoursAnEmbeddingCodecsDecode(t *testing.T) {
	inst, err := readNode(overridingCodec{}, "quote-service", "7c0f5a2e-3d41-4a8e-9b51-2f6e1c9d8a10", scanSeeds(t)[1], false, nil)
	if err != nil || inst.Address != "overridden" {
		t.Fatalf("readNode = %+v, %v; want the codec's own Decode", inst, err)
	}
}

// text's word-at-a-time scan against a byte loop, for every byte value at
// every position before the quote, at it and after it, in strings shorter
// and longer than a word.
func TestTextMatchesAByteLoop(t *testing.T) {
	want := func(b []byte) (int, bool) {
		for i, c := range b {
			switch {
			case c == '"':
				return i, true
			case c < 0x20 || c >= 0x80 || c == '\\':
				return 0, false
			}
		}
		return 0, false
	}
	for n := range 20 {
		for _, quoteAt := range []int{-1, n / 3, n - 1} {
			for pos := range n {
				for c := range 256 {
					b := bytes.Repeat([]byte{'a'}, n)
					if quoteAt >= 0 {
						b[quoteAt] = '"'
					}
					b[pos] = byte(c)
					end, ok := want(b)
					s := scanner{b: b}
					got, gotOK := s.text()
					if gotOK != ok || ok && (len(got) != end || s.i != end) {
						t.Fatalf("text(%q) = %q, %v (at %d); want %d, %v", b, got, gotOK, s.i, end, ok)
					}
				}
			}
		}
	}
}
