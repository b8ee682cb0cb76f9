package sd

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode"
)

// MetadataGoKitInstance holds, on an Instance read from a go-kit node, the
// node's instance string as go-kit's sd/zk Instancer hands it to a
// Factory ("10.0.0.7:8080" or "http://10.0.0.7:8080").
const MetadataGoKitInstance = "gokit_instance"

// MetadataTwinOf marks, on an Instance MixedCodec read, a go-kit twin of a
// gracekit registration: the id of the Curator node it stands beside.
const MetadataTwinOf = "gracekit_twin_of"

// GoKitTwinPrefix starts the name of the node a gracekit provider writes
// for go-kit consumers (GoKitCodec.NodeName). It cannot start a Curator id
// gracekit writes ('~' is no UUID character), and it does not start with
// "_c_", where go-zookeeper's protected-node lookup reads 32 characters of
// guid.
const GoKitTwinPrefix = "gokit~"

// GoKitCodec reads and writes go-kit sd/zk's layout: under the service
// path, nodes whose data is the instance string and whose name says
// nothing (go-kit's Registrar creates protected ephemeral sequential nodes,
// "_c_<32 hex>-<sequence>"). Decode reads any node name and the data as
// "host:port" or a URL with a host and an optional port; the Instance's
// ID is the node's name.
//
// For writing, a Registrar with GoKitCodec creates what go-kit's stock
// Instancer reads, unchanged: an EPHEMERAL node with the instance string
// "address:port" as data, named GoKitTwinPrefix + the instance's id, so
// that it is deleted by its path and re-created after a session expiry
// like any gracekit registration. Such a node has no status: take it out
// of rotation by deregistering it.
type GoKitCodec struct{}

var _ Codec = GoKitCodec{}

// NodeName is GoKitTwinPrefix followed by the instance id.
func (GoKitCodec) NodeName(inst Instance) string { return GoKitTwinPrefix + inst.ID }

// Encode returns the instance string go-kit's consumers read: address:port.
func (GoKitCodec) Encode(inst Instance) ([]byte, error) {
	if !ValidHost(inst.Address) || inst.Port < 1 || inst.Port > 65535 {
		return nil, fmt.Errorf("sd: encode: a go-kit node needs an address and a port from 1 to 65535 (got %q, %d)", inst.Address, inst.Port)
	}
	return []byte(inst.HostPort()), nil
}

// Decode reads a go-kit node: data "host:port" or a URL. The Instance's ID
// is the node's name, and MetadataGoKitInstance keeps the string.
func (GoKitCodec) Decode(service, child string, data []byte) (Instance, error) {
	return decodeGoKit(service, child, data)
}

func decodeGoKit(service, child string, data []byte) (Instance, error) {
	s := string(data)
	bad := func(reason string, err error) (Instance, error) {
		return Instance{}, &MalformedError{Reason: reason, Err: err}
	}
	if s == "" {
		return bad("a go-kit node's data is its instance string, and this one has none", nil)
	}
	if strings.IndexFunc(s, unicode.IsSpace) >= 0 {
		return bad(fmt.Sprintf("instance string %q has spaces", s), nil)
	}
	inst := Instance{Name: service, ID: child, Metadata: map[string]string{MetadataGoKitInstance: s}}
	hostPort, scheme := s, ""
	if i := strings.Index(s, "://"); i >= 0 {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return bad(fmt.Sprintf("instance string %q is no URL with a host", s), err)
		}
		hostPort, scheme = u.Host, u.Scheme
	}
	host, port, err := net.SplitHostPort(hostPort)
	switch {
	case err != nil && scheme != "":
		// A URL without a port: the scheme's.
		host = strings.Trim(hostPort, "[]")
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		default:
			return bad(fmt.Sprintf("instance string %q names no port and its scheme %q has none by default", s, scheme), nil)
		}
	case err != nil:
		return bad(fmt.Sprintf("instance string %q is neither host:port nor a URL", s), err)
	}
	p, perr := strconv.Atoi(port)
	if perr != nil || p < 1 || p > 65535 || !ValidHost(host) {
		return bad(fmt.Sprintf("instance string %q has no valid host and port", s), perr)
	}
	inst.Address = host
	if scheme == "https" {
		inst.SSLPort = p
	} else {
		inst.Port = p
	}
	return inst, nil
}

// MixedCodec reads a service whose nodes are mixed during a migration from
// go-kit's sd/zk: Curator JSON nodes (gracekit's, Curator's, Spring's) as
// CuratorCodec does, go-kit nodes as GoKitCodec does, and neither counted
// as malformed. It writes as CuratorCodec does.
//
// A go-kit twin (a node named GoKitTwinPrefix + id, written by a gracekit
// provider for go-kit consumers) carries MetadataTwinOf. Where the twins
// stand beside their Curator nodes (GoKitRegistration's path is the
// provider's base path), a twin is read as out of service, so that the
// instance is routed once, through its Curator node, whose status follows
// the stop. Where they stand under a path of their own (the go-kit path,
// with the Curator nodes elsewhere, so that Curator readers find no node
// that is not JSON), set RouteTwins: a twin is then read as a go-kit node,
// in rotation while it exists.
type MixedCodec struct {
	CuratorCodec
	// RouteTwins reads twins as instances in rotation; see above.
	RouteTwins bool
}

var _ Codec = MixedCodec{}

// Decode reads the node as Curator JSON when its data is a JSON object,
// as a go-kit twin when its name says so, and as a go-kit node otherwise.
func (c MixedCodec) Decode(service, child string, data []byte) (Instance, error) {
	if d := bytes.TrimLeft(data, " \t\r\n"); len(d) > 0 && d[0] == '{' {
		return CuratorCodec{}.Decode(service, child, data)
	}
	inst, err := decodeGoKit(service, child, data)
	if err != nil {
		return inst, err
	}
	if id, ok := strings.CutPrefix(child, GoKitTwinPrefix); ok && id != "" {
		inst.Metadata[MetadataTwinOf] = id
		if !c.RouteTwins {
			inst.Metadata[MetadataStatus] = string(StatusOutOfService)
		}
	}
	return inst, nil
}
