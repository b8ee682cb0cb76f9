package sd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Codec maps between an instance and its znode: the node's name under the
// service path and its data.
type Codec interface {
	// NodeName is the name of the instance's node under the service path.
	NodeName(inst Instance) string
	// Encode returns the node's data. inst may carry the bytes it was read
	// from; fields this package does not know are kept from them.
	Encode(inst Instance) ([]byte, error)
	// Decode reads the node named child of service. A *MalformedError says
	// why the node cannot be used; such a node is skipped, never fatal.
	Decode(service, child string, data []byte) (Instance, error)
}

// MalformedError describes a node whose name or data cannot be read.
type MalformedError struct {
	Path   string
	Reason string
	Err    error // the underlying decoding error, if any
}

func (e *MalformedError) Error() string {
	msg := "sd: malformed node"
	if e.Path != "" {
		msg += " " + e.Path
	}
	msg += ": " + e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *MalformedError) Unwrap() error { return e.Err }

// CuratorCodec reads and writes Apache Curator x-discovery's JSON, with
// Spring Cloud Zookeeper's ZookeeperInstance payload, byte for byte the way
// Spring services write it. It is the default.
type CuratorCodec struct{}

var _ Codec = CuratorCodec{}

// NodeName is the instance id.
func (CuratorCodec) NodeName(inst Instance) string { return inst.ID }

type uriPart struct {
	Value    string `json:"value"`
	Variable bool   `json:"variable"`
}

type uriSpec struct {
	Parts []uriPart `json:"parts"`
}

// parseURISpec splits "{scheme}://{address}:{port}" into Curator's parts.
func parseURISpec(s string) uriSpec {
	var spec uriSpec
	for s != "" {
		open := strings.IndexByte(s, '{')
		if open < 0 {
			spec.Parts = append(spec.Parts, uriPart{Value: s})
			break
		}
		if open > 0 {
			spec.Parts = append(spec.Parts, uriPart{Value: s[:open]})
		}
		end := strings.IndexByte(s[open:], '}')
		if end < 0 {
			spec.Parts = append(spec.Parts, uriPart{Value: s[open:]})
			break
		}
		spec.Parts = append(spec.Parts, uriPart{Value: s[open+1 : open+end], Variable: true})
		s = s[open+end+1:]
	}
	return spec
}

func (u uriSpec) String() string {
	var b strings.Builder
	for _, p := range u.Parts {
		if p.Variable {
			b.WriteString("{" + p.Value + "}")
		} else {
			b.WriteString(p.Value)
		}
	}
	return b.String()
}

// Field names Curator writes, in its order; anything else is kept as found.
var (
	curatorFields = []string{"name", "id", "address", "port", "sslPort", "payload", "registrationTimeUTC", "serviceType", "uriSpec"}
	payloadFields = []string{"@class", "id", "name", "metadata"}
)

// Encode writes the Curator JSON. The payload's @class is always Spring's
// ZookeeperInstance, since Java readers cast to it.
func (CuratorCodec) Encode(inst Instance) ([]byte, error) {
	if inst.Name == "" || inst.ID == "" || inst.Address == "" {
		return nil, fmt.Errorf("sd: encode: name, id and address are required (got name=%q id=%q address=%q)", inst.Name, inst.ID, inst.Address)
	}
	if err := checkPort("port", inst.Port, inst.SSLPort == 0); err != nil {
		return nil, err
	}
	if err := checkPort("ssl port", inst.SSLPort, false); err != nil {
		return nil, err
	}
	var top, payload map[string]json.RawMessage
	if len(inst.raw) > 0 {
		_ = json.Unmarshal(inst.raw, &top) // raw was validated when read
		_ = json.Unmarshal(top["payload"], &payload)
	}
	meta := inst.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	pb := newObject()
	pb.field("@class", SpringInstanceClass)
	pb.field("id", inst.ID)
	pb.field("name", inst.Name)
	pb.field("metadata", meta)
	pb.extras(payload, payloadFields)

	ob := newObject()
	ob.field("name", inst.Name)
	ob.field("id", inst.ID)
	ob.field("address", inst.Address)
	ob.field("port", optionalPort(inst.Port))
	ob.field("sslPort", optionalPort(inst.SSLPort))
	ob.raw("payload", pb.bytes())
	regTime := inst.RegistrationTime
	if regTime.IsZero() {
		regTime = time.Now()
	}
	ob.field("registrationTimeUTC", regTime.UnixMilli())
	st := inst.ServiceType
	if st == "" {
		st = "DYNAMIC"
	}
	ob.field("serviceType", st)
	spec := inst.URISpec
	if spec == "" {
		spec = DefaultURISpec
	}
	ob.field("uriSpec", parseURISpec(spec))
	ob.extras(top, curatorFields)
	return ob.bytes(), ob.err
}

func optionalPort(p int) *int {
	if p == 0 {
		return nil
	}
	return &p
}

func checkPort(name string, p int, required bool) error {
	if (required && p == 0) || p < 0 || p > 65535 {
		return fmt.Errorf("sd: encode: invalid %s %d (allowed 1 to 65535)", name, p)
	}
	return nil
}

// object writes a JSON object with fields in the order they are added.
type object struct {
	buf bytes.Buffer
	n   int
	err error
}

func newObject() *object {
	o := &object{}
	o.buf.WriteByte('{')
	return o
}

func (o *object) raw(key string, v []byte) {
	if o.n > 0 {
		o.buf.WriteByte(',')
	}
	o.n++
	k, _ := json.Marshal(key)
	o.buf.Write(k)
	o.buf.WriteByte(':')
	o.buf.Write(v)
}

func (o *object) field(key string, v any) {
	b, err := json.Marshal(v)
	if err != nil && o.err == nil {
		o.err = fmt.Errorf("sd: encode %s: %w", key, err)
	}
	o.raw(key, b)
}

// extras appends the fields of from that are not in known, sorted by name.
func (o *object) extras(from map[string]json.RawMessage, known []string) {
	keys := make([]string, 0, len(from))
	for k := range from {
		if !slices.Contains(known, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		o.raw(k, from[k])
	}
}

func (o *object) bytes() []byte {
	o.buf.WriteByte('}')
	return o.buf.Bytes()
}

type curatorNode struct {
	Name                *string  `json:"name"`
	ID                  *string  `json:"id"`
	Address             *string  `json:"address"`
	Port                *int     `json:"port"`
	SSLPort             *int     `json:"sslPort"`
	Payload             *payload `json:"payload"`
	RegistrationTimeUTC *int64   `json:"registrationTimeUTC"`
	ServiceType         *string  `json:"serviceType"`
	URISpec             *uriSpec `json:"uriSpec"`
}

// payload reads the payload lazily: its metadata means something only
// when @class is Spring's, and other classes may hold anything.
type payload struct {
	Class    *string         `json:"@class"`
	Metadata json.RawMessage `json:"metadata"`
}

// Decode reads Curator JSON. It accepts what Curator's own readers accept
// (no payload, unknown fields) and refuses what would mislead a caller: not
// an object, a missing name, id or address, a port out of range, an id that
// is not the node's name, a name that is not the service's. The Instance
// keeps a copy of data, so that Encode keeps the fields it does not know.
func (CuratorCodec) Decode(service, child string, data []byte) (Instance, error) {
	return decodeCurator(service, child, data, true, nil)
}

// readNode decodes for an Instancer, which keeps thousands of instances
// and publishes a few fields of each: without a copy of the node's bytes
// unless keep, and with equal metadata maps shared through shared (nil:
// none). data may be a slice of a bulk read's reply frame: nothing here
// keeps it. Any other Codec, a type that embeds ours and overrides Decode
// included, is asked through Decode, with a copy, since it may keep what
// it is given.
func readNode(c Codec, service, child string, data []byte, keep bool, shared *metaCache) (Instance, error) {
	switch c := c.(type) {
	case CuratorCodec:
		return decodeCurator(service, child, data, keep, shared)
	case PlainCodec:
		return c.Decode(service, child, nil)
	}
	inst, err := c.Decode(service, child, bytes.Clone(data))
	if !keep {
		inst.raw = nil
	}
	return inst, err
}

// curatorView is what Decode reads of a node. The byte slices point into
// the node's data, so nothing is allocated until the checks passed.
type curatorView struct {
	name, id, address, serviceType []byte
	port, sslPort                  int
	regTime                        int64
	hasRegTime                     bool
	uriSpec                        []byte // the uriSpec rebuilt as text ("{scheme}://...")
	meta                           []byte // payload.metadata, when @class is Spring's and it is not null
}

func decodeCurator(service, child string, data []byte, keep bool, shared *metaCache) (Instance, error) {
	inst, _, err := decodeCuratorAt(service, child, "", data, keep, shared)
	return inst, err
}

// decodeCuratorAt is decodeCurator for the node child of dir, which also
// sets Path and returns inst.HostPort(), what an Instancer publishes by
// default: the path, the address and that are one string, one allocation
// where there were three, for every node of a load. An empty dir leaves
// Path and pub empty.
func decodeCuratorAt(service, child, dir string, data []byte, keep bool, shared *metaCache) (inst Instance, pub string, err error) {
	bad := func(reason string, err error) (Instance, string, error) {
		return Instance{}, "", &MalformedError{Reason: reason, Err: err}
	}
	// No buffer for the uriSpec: one on the stack escapes through the
	// scanner's callback, and Spring's spec, nearly every node's, needs none.
	v, ok := scanCurator(data)
	if !ok {
		// Anything but the plain shape Curator writes (escapes, keys in
		// another case, duplicates, a type mismatch, invalid JSON) goes to
		// encoding/json, which decides as it always did.
		var err error
		if v, err = reflectCurator(data); err != nil {
			if len(data) == 0 {
				return bad("empty data, not Curator JSON", nil)
			}
			return bad("not Curator JSON", err)
		}
	}
	switch {
	case len(v.name) == 0:
		return bad("no name", nil)
	case len(v.id) == 0:
		return bad("no id", nil)
	case len(v.address) == 0:
		return bad("no address", nil)
	// string(...) in the messages: a []byte in an interface would make v,
	// and spec with it, escape to the heap on every call.
	case string(v.id) != child:
		return bad(fmt.Sprintf("id %q is not the node's name %q", string(v.id), child), nil)
	case service != "" && string(v.name) != service:
		return bad(fmt.Sprintf("name %q is not the service %q", string(v.name), service), nil)
	}
	if v.port < 0 || v.port > 65535 || v.sslPort < 0 || v.sslPort > 65535 || v.port+v.sslPort == 0 {
		return bad(fmt.Sprintf("port %d / sslPort %d (need one from 1 to 65535)", v.port, v.sslPort), nil)
	}
	// Strings are copied (string(b)), never sliced from data: a bulk
	// read's reply frame would stay alive. Name and id are the service's
	// and the child's, which the caller holds already.
	inst = Instance{ID: child, Port: v.port, SSLPort: v.sslPort}
	if dir == "" {
		inst.Address = string(v.address)
	} else {
		var buf [128]byte
		b := append(append(append(buf[:0], dir...), '/'), child...)
		at := len(b)
		b = appendHostPort(b, v.address, inst.port())
		all := string(b)
		inst.Path, pub = all[:at], all[at:]
		start := 0
		if bytes.IndexByte(v.address, ':') >= 0 {
			start = 1 // after IPv6's '['
		}
		inst.Address = pub[start : start+len(v.address)]
	}
	inst.Name = service
	if service == "" {
		inst.Name = string(v.name)
	}
	if v.hasRegTime {
		inst.RegistrationTime = time.UnixMilli(v.regTime).UTC()
	}
	inst.ServiceType = internServiceType(v.serviceType)
	if string(v.uriSpec) == DefaultURISpec {
		inst.URISpec = DefaultURISpec
	} else if len(v.uriSpec) > 0 {
		inst.URISpec = string(v.uriSpec)
	}
	// A payload of another class is kept as it is; only Spring's has
	// metadata we read.
	if len(v.meta) > 0 {
		m, err := shared.get(v.meta)
		if err != nil {
			return bad("payload.metadata is not a map of strings", err)
		}
		inst.Metadata = m
	}
	if keep {
		inst.raw = bytes.Clone(data)
	}
	return inst, pub, nil
}

// reflectCurator reads data with encoding/json: the reference that
// scanCurator follows, and the reader of any node scanCurator leaves.
func reflectCurator(data []byte) (curatorView, error) {
	var n curatorNode
	if err := json.Unmarshal(data, &n); err != nil {
		return curatorView{}, err
	}
	var v curatorView
	str := func(p *string) []byte {
		if p == nil {
			return nil
		}
		return []byte(*p)
	}
	v.name, v.id, v.address, v.serviceType = str(n.Name), str(n.ID), str(n.Address), str(n.ServiceType)
	if n.Port != nil {
		v.port = *n.Port
	}
	if n.SSLPort != nil {
		v.sslPort = *n.SSLPort
	}
	if n.RegistrationTimeUTC != nil {
		v.regTime, v.hasRegTime = *n.RegistrationTimeUTC, true
	}
	if n.URISpec != nil {
		v.uriSpec = []byte(n.URISpec.String())
	}
	if p := n.Payload; p != nil && p.Class != nil && *p.Class == SpringInstanceClass && len(p.Metadata) > 0 && string(p.Metadata) != "null" {
		v.meta = p.Metadata
	}
	return v, nil
}

func internServiceType(b []byte) string {
	switch string(b) {
	case "":
		return ""
	case "DYNAMIC":
		return "DYNAMIC"
	case "STATIC":
		return "STATIC"
	case "PERMANENT":
		return "PERMANENT"
	case "DYNAMIC_SEQUENTIAL":
		return "DYNAMIC_SEQUENTIAL"
	}
	return string(b)
}

// metaCache shares one metadata map among the instances whose metadata is
// the same JSON text, as most of a service's are ({"instance_status":"UP"}):
// a map of one entry costs more than 300 bytes. The shared maps are never
// written: an Instancer hands out copies (Instance.clone). A nil cache
// shares nothing.
type metaCache struct {
	mu sync.Mutex
	m  map[string]map[string]string // by the metadata's JSON text
}

// metaCacheMax bounds the cache: when full it starts over, which costs
// sharing only, so metadata that differs on every node cannot grow it.
const metaCacheMax = 1024

func (c *metaCache) get(raw []byte) (map[string]string, error) {
	if c == nil {
		return decodeMetadata(raw)
	}
	c.mu.Lock()
	m, ok := c.m[string(raw)]
	c.mu.Unlock()
	if ok {
		return m, nil
	}
	m, err := decodeMetadata(raw)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= metaCacheMax {
		c.m = map[string]map[string]string{}
	}
	c.m[string(raw)] = m
	c.mu.Unlock()
	return m, nil
}

// decodeMetadata reads a JSON object of strings: by hand when it is plain,
// else with encoding/json, which decides as it always did.
func decodeMetadata(raw []byte) (map[string]string, error) {
	if m, ok := scanStringMap(raw); ok {
		return m, nil
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// PlainCodec reads the plain layout /<prefix>/<service>/<host:port>, whose
// nodes carry no data (go-kit's and many hand-made registrations).
type PlainCodec struct{}

var _ Codec = PlainCodec{}

// NodeName is "address:port".
func (PlainCodec) NodeName(inst Instance) string { return inst.HostPort() }

// Encode returns no data: the node's name says it all.
func (PlainCodec) Encode(inst Instance) ([]byte, error) {
	if inst.Address == "" || inst.Port < 1 || inst.Port > 65535 {
		return nil, fmt.Errorf("sd: encode: plain nodes need an address and a port from 1 to 65535 (got %q, %d)", inst.Address, inst.Port)
	}
	return nil, nil
}

// Decode parses the node name as host:port; data is ignored. An IPv6
// host may come in brackets ("[::1]:8080") or bare, as tools that write
// ip + ":" + port do ("0:0:0:0:0:0:0:1:8080"): the port is then after the
// last colon.
func (PlainCodec) Decode(service, child string, _ []byte) (Instance, error) {
	host, port, err := net.SplitHostPort(child)
	if err != nil {
		i := strings.LastIndexByte(child, ':')
		if a, perr := netip.ParseAddr(child[:max(i, 0)]); i < 0 || perr != nil || !a.Is6() {
			return Instance{}, &MalformedError{Reason: "node name is not host:port", Err: err}
		}
		host, port = child[:i], child[i+1:]
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 || host == "" {
		return Instance{}, &MalformedError{Reason: fmt.Sprintf("node name %q has no valid host and port", child)}
	}
	return Instance{Name: service, ID: child, Address: host, Port: p}, nil
}
