package sd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// An operator takes a running instance out of rotation by writing three
// metadata keys into its node: MetadataDrainedBy, MetadataDrainedStatus
// (the status the node had), and instance_status OUT_OF_SERVICE, which
// every Curator and Spring reader already obeys. The node's own Registrar
// reads the marker wherever it sees its node (every change fires its
// watch): while the marker is there it writes OUT_OF_SERVICE whatever
// SetStatus asked for, keeps MetadataDrainedStatus equal to the status its
// owner wants, and keeps the marker when it re-creates the node after a
// session expiry, a delete, or a DeregisterContext and RegisterContext of
// the same Registrar; when the marker goes (Undrain), the node has its
// recorded status again. The drain is a setData on an existing node:
// ZooKeeper's ACL on the node decides who may do it (registered nodes are
// writable only by their owner's credentials), and nothing is ever
// deleted. It ends with undrain, or when the process stops (a new process
// registers UP).
//
// Drain and Undrain edit the node's bytes in place: only the keys they own
// in payload.metadata change, and every other byte (the payload's @class,
// fields this package does not know, their order, the spacing) is kept.
// Nodes whose layout stores no status (PlainCodec, GoKitCodec, go-kit
// twins) cannot be marked: there, out of rotation is the node's absence
// (see ErrNoStatus).

// MetadataDrainedBy is the metadata key that says who took the instance
// out of rotation; absent when nobody did.
const MetadataDrainedBy = "drained_by"

// MetadataDrainedStatus is the metadata key, beside MetadataDrainedBy,
// that holds the status the node had when it was drained (its Registrar
// keeps it equal to the status its owner wants): Undrain restores it, so
// that a node no gracekit Registrar keeps, a Curator or Spring one, comes
// back UP.
const MetadataDrainedStatus = "drained_status"

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

// ErrNoStatus says that a node's layout has no place for a status or a
// drain marker (plain host:port nodes, go-kit nodes and twins): take such
// an instance out of rotation by removing its node, as its Registrar does
// for OUT_OF_SERVICE.
var ErrNoStatus = errors.New("sd: the node stores no status (plain or go-kit layout): out of rotation there is the node's absence")

// ForeignPayloadError says that a Curator node's payload is not Spring's
// ZookeeperInstance, so it has no metadata its readers obey: a drain would
// reach no reader, and writing one would change a payload of someone
// else's class.
type ForeignPayloadError struct {
	Path  string
	Class string // "" when the node has no payload or no @class
}

func (e *ForeignPayloadError) Error() string {
	what := fmt.Sprintf("payload class %q", e.Class)
	if e.Class == "" {
		what = "no Spring payload"
	}
	return fmt.Sprintf("sd: drain %s: the node has %s, so no instance_status its readers obey: a drain would reach none of them; the node is left as it is (stop the instance, or drain it from its own registry)", e.Path, what)
}

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

// Drain returns a node's data with the operator's marker, the status it
// had (MetadataDrainedStatus) and OUT_OF_SERVICE; every other byte is
// kept. Draining a drained node keeps the status recorded first. codec is
// the layout the node is read with: CuratorCodec or MixedCodec (for a
// JSON node); other layouts return ErrNoStatus, and a Curator node whose
// payload is not Spring's a *ForeignPayloadError.
func Drain(codec Codec, service, child string, data []byte) ([]byte, error) {
	inst, err := drainable(codec, service, child, data)
	if err != nil {
		return nil, err
	}
	sets := []metaSet{{MetadataStatus, string(StatusOutOfService)}, {MetadataDrainedBy, DrainedByOperator}}
	if _, ok := inst.Metadata[MetadataDrainedStatus]; !ok || inst.Metadata[MetadataDrainedBy] == "" {
		sets = append(sets, metaSet{MetadataDrainedStatus, string(inst.Status())})
	}
	return editMetadata(data, sets, nil)
}

// Undrain returns a node's data without the operator's marker, with the
// status recorded at the drain (MetadataDrainedStatus) again; every other
// byte is kept. A node drained before the status was recorded keeps its
// status: its Registrar writes the one its owner wants. A node that is
// not drained is returned as it is.
func Undrain(codec Codec, service, child string, data []byte) ([]byte, error) {
	inst, err := drainable(codec, service, child, data)
	if err != nil {
		return nil, err
	}
	_, marked := inst.Metadata[MetadataDrainedBy]
	recorded, hasRecord := inst.Metadata[MetadataDrainedStatus]
	if !marked && !hasRecord {
		return data, nil
	}
	var sets []metaSet
	if hasRecord && (recorded == string(StatusUp) || recorded == string(StatusOutOfService)) {
		sets = append(sets, metaSet{MetadataStatus, recorded})
	}
	return editMetadata(data, sets, []string{MetadataDrainedBy, MetadataDrainedStatus})
}

// drainable reads the node as Curator JSON and refuses what a drain
// cannot mark.
func drainable(codec Codec, service, child string, data []byte) (Instance, error) {
	p := service + "/" + child
	switch codec.(type) {
	case CuratorCodec, MixedCodec:
	default:
		return Instance{}, fmt.Errorf("sd: drain %s: %T: %w", p, codec, ErrNoStatus)
	}
	if d := bytes.TrimLeft(data, " \t\r\n"); len(d) == 0 || d[0] != '{' {
		return Instance{}, fmt.Errorf("sd: drain %s: %w", p, ErrNoStatus) // a go-kit node or twin of a mixed service
	}
	inst, err := CuratorCodec{}.Decode(service, child, data)
	if err != nil {
		return Instance{}, fmt.Errorf("sd: drain %s: %w", p, err)
	}
	top, err := members(data)
	if err != nil {
		return Instance{}, fmt.Errorf("sd: drain %s: %w", p, err)
	}
	class := ""
	if pl, ok := top.last("payload"); ok {
		if pm, err := members(data[pl.vStart:pl.vEnd]); err == nil {
			if c, ok := pm.last("@class"); ok {
				_ = json.Unmarshal(data[pl.vStart+c.vStart:pl.vStart+c.vEnd], &class)
			}
		}
	}
	if class != SpringInstanceClass {
		return Instance{}, &ForeignPayloadError{Path: p, Class: class}
	}
	if inst.Metadata == nil {
		inst.Metadata = map[string]string{}
	}
	return inst, nil
}

type metaSet struct{ key, value string }

// editMetadata sets and deletes keys of payload.metadata in data, in
// place: a key that exists keeps its position, a new one goes last, and
// every byte outside the values changed is kept.
func editMetadata(data []byte, sets []metaSet, dels []string) ([]byte, error) {
	top, err := members(data)
	if err != nil {
		return nil, err
	}
	pl, _ := top.last("payload") // drainable checked it
	payload := data[pl.vStart:pl.vEnd]
	pm, err := members(payload)
	if err != nil {
		return nil, err
	}
	var newPayload []byte
	if m, ok := pm.last("metadata"); ok && !bytes.Equal(payload[m.vStart:m.vEnd], []byte("null")) {
		meta, err := editObject(payload[m.vStart:m.vEnd], sets, dels)
		if err != nil {
			return nil, fmt.Errorf("sd: payload.metadata: %w", err)
		}
		newPayload = splice(payload, m.vStart, m.vEnd, meta)
	} else {
		meta, err := editObject([]byte("{}"), sets, dels)
		if err != nil {
			return nil, err
		}
		if ok {
			newPayload = splice(payload, m.vStart, m.vEnd, meta)
		} else {
			newPayload, err = editObjectRaw(payload, "metadata", meta)
			if err != nil {
				return nil, err
			}
		}
	}
	return splice(data, pl.vStart, pl.vEnd, newPayload), nil
}

func splice(b []byte, from, to int, with []byte) []byte {
	return slices.Concat(b[:from], with, b[to:])
}

// member is one key and value of a JSON object, as offsets in its bytes.
type member struct {
	key          string
	kStart       int // the key's opening quote
	vStart, vEnd int
}

type objectMembers struct {
	list  []member
	open  int // after '{'
	close int // the closing '}'
}

func (o objectMembers) last(key string) (member, bool) {
	for i := len(o.list) - 1; i >= 0; i-- {
		if o.list[i].key == key {
			return o.list[i], true
		}
	}
	return member{}, false
}

// members lists the members of the JSON object b with encoding/json's
// tokenizer, so that what it accepts is what the codec accepts.
func members(b []byte) (objectMembers, error) {
	var o objectMembers
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return o, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return o, fmt.Errorf("not a JSON object")
	}
	o.open = int(dec.InputOffset())
	prev := o.open
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return o, err
		}
		key, _ := tok.(string)
		kStart := prev + bytes.IndexByte(b[prev:], '"')
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return o, err
		}
		end := int(dec.InputOffset())
		o.list = append(o.list, member{key: key, kStart: kStart, vStart: end - len(raw), vEnd: end})
		prev = end
	}
	if _, err := dec.Token(); err != nil { // '}'
		return o, err
	}
	o.close = int(dec.InputOffset()) - 1
	return o, nil
}

// editObject sets string values and deletes keys of the JSON object obj.
func editObject(obj []byte, sets []metaSet, dels []string) ([]byte, error) {
	out := obj
	for _, s := range sets {
		v, _ := json.Marshal(s.value)
		o, err := members(out)
		if err != nil {
			return nil, err
		}
		if m, ok := o.last(s.key); ok {
			out = splice(out, m.vStart, m.vEnd, v)
			continue
		}
		if out, err = editObjectRaw(out, s.key, v); err != nil {
			return nil, err
		}
	}
	for _, k := range dels {
		for {
			o, err := members(out)
			if err != nil {
				return nil, err
			}
			i := slices.IndexFunc(o.list, func(m member) bool { return m.key == k })
			if i < 0 {
				break
			}
			switch {
			case i > 0: // from the end of the one before: its comma goes
				out = splice(out, o.list[i-1].vEnd, o.list[i].vEnd, nil)
			case len(o.list) > 1: // the first: up to the next key
				out = splice(out, o.list[0].kStart, o.list[1].kStart, nil)
			default:
				out = splice(out, o.open, o.close, nil)
			}
		}
	}
	return out, nil
}

// editObjectRaw appends the member key: raw to the JSON object obj.
func editObjectRaw(obj []byte, key string, raw []byte) ([]byte, error) {
	o, err := members(obj)
	if err != nil {
		return nil, err
	}
	k, _ := json.Marshal(key)
	add := slices.Concat(k, []byte(":"), raw)
	if n := len(o.list); n > 0 {
		return splice(obj, o.list[n-1].vEnd, o.list[n-1].vEnd, slices.Concat([]byte(","), add)), nil
	}
	return splice(obj, o.open, o.open, add), nil
}
