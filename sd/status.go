package sd

import "strings"

// Status is an instance's availability as Spring Cloud Zookeeper writes it in
// payload.metadata.instance_status.
type Status string

// Statuses understood by Spring Cloud Zookeeper consumers.
const (
	StatusUp           Status = "UP"
	StatusOutOfService Status = "OUT_OF_SERVICE"
)

// MetadataStatus is the payload metadata key that holds the Status.
const MetadataStatus = "instance_status"

// MetadataFlushPath is the payload metadata key under which a gateway
// registers the path of its flush endpoint, so providers can find it.
const MetadataFlushPath = "gracekit_flush_path"

// MetadataGRPCPort is the metadata key of an instance's gRPC port when it
// serves gRPC: the key grpc-spring-boot-starter registers and reads, so
// that Java gRPC clients find the port too. A provider that serves only
// gRPC registers it as its Port as well.
const MetadataGRPCPort = "gRPC_port"

// ReservedMetadata are the metadata keys gracekit writes itself: the
// status, the gateways' flush path and the marks of who took an instance
// out of rotation. An instance's own metadata may not set them (NewRegistrar
// refuses the marks; fxmodule's Config refuses them all), so that no
// instance registers drained, or undoes an undrain at its next expiry.
var ReservedMetadata = []string{MetadataStatus, MetadataFlushPath, MetadataDrainedBy, MetadataDrainedStatus, MetadataOutBy}

// StoresStatus tells whether codec's nodes carry an instance's status: it
// encodes inst OUT_OF_SERVICE and reads it back. CuratorCodec and
// MixedCodec do; PlainCodec and GoKitCodec do not (their nodes hold an
// address only), so a Registrar with them takes an instance out of
// rotation by deleting its node. A codec that cannot encode inst is taken
// to store it.
func StoresStatus(codec Codec, inst Instance) bool {
	inst = inst.clone()
	inst.Metadata[MetadataStatus] = string(StatusOutOfService)
	data, err := codec.Encode(inst)
	if err != nil {
		return true
	}
	back, err := codec.Decode(inst.Name, codec.NodeName(inst), data)
	if err != nil {
		return true
	}
	return back.Status() == StatusOutOfService
}

// CheckMetadata refuses an instance's own metadata that holds a mark of
// who took it out of rotation (MetadataDrainedBy, MetadataDrainedStatus,
// MetadataOutBy): only the Registrar and gracekit drain write them.
// NewRegistrar and provider.New call it.
func CheckMetadata(md map[string]string) error {
	for _, k := range ReservedMetadata {
		if k == MetadataStatus || k == MetadataFlushPath {
			continue // the wanted status, and a gateway's own path
		}
		if _, ok := md[k]; ok {
			return &ConfigError{"metadata key", k, "keys other than " + strings.Join(ReservedMetadata[2:], ", ") + ", which the Registrar and gracekit drain write"}
		}
	}
	return nil
}
