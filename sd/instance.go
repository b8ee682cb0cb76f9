package sd

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// SpringInstanceClass is the payload class Spring Cloud Zookeeper writes and
// casts to. Curator's Java readers fail for a whole service when it is wrong.
const SpringInstanceClass = "org.springframework.cloud.zookeeper.discovery.ZookeeperInstance"

// DefaultBasePath is where Curator and Spring Cloud Zookeeper keep services.
const DefaultBasePath = "/services"

// Instance is one registered instance of a service, as its node describes it.
type Instance struct {
	Name     string // service name
	ID       string // instance id, also the node's name in the Curator layout
	Address  string
	Port     int // 0 when unset
	SSLPort  int // 0 when unset (written as null)
	Metadata map[string]string
	// RegistrationTime is Curator's registrationTimeUTC.
	RegistrationTime time.Time
	// ServiceType is Curator's serviceType, "DYNAMIC" for ephemeral nodes.
	ServiceType string
	// URISpec is Curator's uriSpec, e.g. "{scheme}://{address}:{port}".
	URISpec string

	// Filled in by readers from the node's Stat.
	Path           string
	Czxid          int64 // creation zxid: orders re-registrations
	Version        int32 // data version, for version-checked writes
	EphemeralOwner int64

	raw []byte // the node's data as read, so unknown fields survive a rewrite
}

// Status reads metadata.instance_status; an instance without one is up.
func (i Instance) Status() Status {
	if s, ok := i.Metadata[MetadataStatus]; ok && s != "" {
		return Status(s)
	}
	return StatusUp
}

// HostPort is "address:port" (the SSL port when there is no plain one).
func (i Instance) HostPort() string {
	// net.JoinHostPort(i.Address, strconv.Itoa(port)) in one allocation:
	// every node of a load renders one.
	var buf [64]byte
	return string(appendHostPort(buf[:0], i.Address, i.port()))
}

// port is where the instance serves: Port, or SSLPort when Port is unset.
func (i Instance) port() int {
	if i.Port == 0 {
		return i.SSLPort
	}
	return i.Port
}

// appendHostPort appends net.JoinHostPort(addr, port) to b.
func appendHostPort[S string | []byte](b []byte, addr S, port int) []byte {
	v6 := false
	for i := range len(addr) {
		if addr[i] == ':' {
			v6 = true
			break
		}
	}
	if v6 {
		b = append(b, '[')
	}
	b = append(b, addr...)
	if v6 {
		b = append(b, ']')
	}
	b = append(b, ':')
	return strconv.AppendInt(b, int64(port), 10)
}

// GRPCHostPort is where the instance serves gRPC: its address with the
// port registered under MetadataGRPCPort, which a provider serving HTTP
// and gRPC on two ports sets beside its HTTP Port; HostPort when there is
// none (or it is not a port).
func (i Instance) GRPCHostPort() string {
	if p, err := strconv.Atoi(i.Metadata[MetadataGRPCPort]); err == nil && p > 0 && p <= 65535 {
		return Instance{Address: i.Address, Port: p}.HostPort()
	}
	return i.HostPort()
}

// URI builds the instance's URI from its uriSpec the way Curator's
// UriSpec.build does: {scheme} is https when an SSL port is set, {port} is
// the plain port (the SSL one when there is none), {ssl-port} the SSL one.
func (i Instance) URI() string {
	spec := i.URISpec
	if spec == "" {
		spec = DefaultURISpec
	}
	scheme := "http"
	if i.SSLPort != 0 {
		scheme = "https"
	}
	port := i.Port
	if port == 0 {
		port = i.SSLPort
	}
	r := strings.NewReplacer(
		"{scheme}", scheme,
		"{name}", i.Name,
		"{id}", i.ID,
		"{address}", i.Address,
		"{port}", strconv.Itoa(port),
		"{ssl-port}", strconv.Itoa(i.SSLPort),
		"{registration-time-utc}", strconv.FormatInt(i.RegistrationTime.UnixMilli(), 10),
		"{service-type}", strings.ToLower(i.ServiceType),
	)
	return r.Replace(spec)
}

// DefaultURISpec is the uriSpec Spring Cloud Zookeeper registers.
const DefaultURISpec = "{scheme}://{address}:{port}"

func (i Instance) clone() Instance {
	m := make(map[string]string, len(i.Metadata))
	for k, v := range i.Metadata {
		m[k] = v
	}
	i.Metadata = m
	return i
}

// ValidNodeName tells whether name can be one znode name: not empty, no
// '/', and not "." or ".." (which would climb the path).
func ValidNodeName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.Contains(name, "/")
}

// ValidHost tells whether host can be an instance's Address: a host name
// (letters, digits, '-', '.', '_') or an IP literal, IPv6 without
// brackets. A port, a scheme or a space makes it invalid: a consumer would
// dial "address:port" and fail.
func ValidHost(host string) bool { return validHost(host) }

// CountInstances returns the service the Instancer watches, the
// instances registered under it as last read (malformed nodes aside),
// whatever their status, and how many of those are UP: for
// endpoint.InstanceCounter, so that an Endpointer with no endpoint says
// whether none is registered or none is UP. It reads no ZooKeeper.
func (in *Instancer) CountInstances() (service string, registered, up int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, e := range in.entries {
		if !e.ok {
			continue
		}
		registered++
		if !e.out {
			up++
		}
	}
	return in.service, registered, up
}

// Describe returns the registration time and metadata of the published
// instance whose string is pub, for endpoint.Describer: an Endpointer ramps
// the instances that join its set from their registration time. When
// several registrations publish pub (a provider restarted on the same
// address while its old node lives on), it describes the newest, the one
// created last (highest Czxid). ok is false when pub is not published now.
// The metadata map is shared and must not be modified. It does not
// allocate.
func (in *Instancer) Describe(pub string) (registered time.Time, metadata map[string]string, ok bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	inst := in.newestLocked(pub)
	if inst == nil {
		return time.Time{}, nil, false
	}
	return inst.RegistrationTime, inst.Metadata, true
}

// Registration names the registration Describe describes: its instance id
// and creation zxid, for endpoint.RegistrationDescriber. An Endpointer
// keys a ramp by it, so that a restart on the same address ramps again.
// It does not allocate.
func (in *Instancer) Registration(pub string) (id string, czxid int64, ok bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	inst := in.newestLocked(pub)
	if inst == nil {
		return "", 0, false
	}
	return inst.ID, inst.Czxid, true
}

// newestLocked is the published registration of pub created last, nil when
// pub is not published. in.mu must be held.
func (in *Instancer) newestLocked(pub string) *Instance {
	i, found := slices.BinarySearch(in.pub, pub)
	if !found {
		return nil
	}
	var newest *Instance
	for ; i < len(in.pub) && i < len(in.pubInst) && in.pub[i] == pub; i++ {
		if inst := in.pubInst[i]; newest == nil || inst.Czxid > newest.Czxid {
			newest = inst
		}
	}
	return newest
}
