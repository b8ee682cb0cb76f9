package sd

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
