package sd

import "fmt"

// An operator takes a running instance out of rotation by writing two
// metadata keys into its node: MetadataDrainedBy, and instance_status
// OUT_OF_SERVICE, which every Curator and Spring reader already obeys.
// The node's own Registrar reads the marker wherever it sees its node
// (every change fires its watch): while the marker is there it writes
// OUT_OF_SERVICE whatever SetStatus asked for, and keeps the marker when
// it re-creates the node after a session expiry or a delete; when the
// marker goes (Undrain), it writes the status its owner wants again. The
// drain is a setData on an existing node: ZooKeeper's ACL on the node
// decides who may do it (registered nodes are writable only by their
// owner's credentials), and nothing is ever deleted. It ends when the
// process stops, with its node.

// MetadataDrainedBy is the metadata key that says who took the instance
// out of rotation; absent when nobody did.
const MetadataDrainedBy = "drained_by"

// DrainedByOperator is MetadataDrainedBy's value for an operator's drain
// (gracekit drain).
const DrainedByOperator = "operator"

// MetadataOutBy is the metadata key that says what else took the instance
// out of rotation: its owner's SetStatusBy writes it with the status, in
// the same setData, and removes it when the instance is UP again. It is a
// record, not a hold: unlike MetadataDrainedBy, the Registrar never keeps
// a node out because of it.
const MetadataOutBy = "out_by"

// OutByHealth is MetadataOutBy's value while the provider's health check
// holds the instance out.
const OutByHealth = "health"

// OutOfServiceBy says who took inst out of rotation: MetadataDrainedBy
// when an operator drained it (the operator's word wins), else
// MetadataOutBy while its status is OUT_OF_SERVICE; "" when nobody said.
func OutOfServiceBy(inst Instance) string {
	if by := inst.Metadata[MetadataDrainedBy]; by != "" {
		return by
	}
	if inst.Status() == StatusOutOfService {
		return inst.Metadata[MetadataOutBy]
	}
	return ""
}

// Drain returns a node's data, as codec reads it, with the operator's
// marker and OUT_OF_SERVICE; every other field is kept.
func Drain(codec Codec, service, child string, data []byte) ([]byte, error) {
	return rewriteDrain(codec, service, child, data, true)
}

// Undrain returns a node's data with the operator's marker removed. The
// status is left OUT_OF_SERVICE: the instance's Registrar writes the one
// its owner wants (UP unless its health check or its stop says otherwise),
// so a sick instance is never UP for a moment.
func Undrain(codec Codec, service, child string, data []byte) ([]byte, error) {
	return rewriteDrain(codec, service, child, data, false)
}

func rewriteDrain(codec Codec, service, child string, data []byte, drain bool) ([]byte, error) {
	if _, ok := codec.(CuratorCodec); !ok {
		return nil, fmt.Errorf("sd: drain %s/%s: %T nodes carry no metadata; a drain needs the Curator layout", service, child, codec)
	}
	inst, err := codec.Decode(service, child, data)
	if err != nil {
		return nil, fmt.Errorf("sd: drain %s/%s: %w", service, child, err)
	}
	inst = inst.clone()
	if drain {
		inst.Metadata[MetadataDrainedBy] = DrainedByOperator
		inst.Metadata[MetadataStatus] = string(StatusOutOfService)
	} else {
		delete(inst.Metadata, MetadataDrainedBy)
	}
	return codec.Encode(inst)
}
