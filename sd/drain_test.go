package sd_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gracekit/gracekit/sd"
)

// foreignSpringNode is a Spring-class node another writer made: fields
// gracekit does not know, at the top and in the payload, its own key order
// in the metadata, and spaces.
const foreignSpringNode = `{"name":"quote","id":"j1","address":"10.0.0.9","port":8080,"sslPort":null,` +
	`"payload":{"@class":"org.springframework.cloud.zookeeper.discovery.ZookeeperInstance","id":"j1","name":"quote",` +
	`"metadata":{"zone": "b","instance_status":"UP","version":"1.2"},"x-extra":[1,{"a":null}]},` +
	`"registrationTimeUTC":1796006863698,"serviceType":"DYNAMIC","enabled":true,` +
	`"uriSpec":{"parts":[{"value":"scheme","variable":true},{"value":"://","variable":false},{"value":"address","variable":true},{"value":":","variable":false},{"value":"port","variable":true}]}}`

// Issue 31: Drain and Undrain change only the keys they own, in place:
// a Curator-written node and a foreign one come back byte for byte, and
// the drained bytes differ from the original only inside the metadata.
func TestDrainKeepsEveryByteItDoesNotOwn(t *testing.T) {
	fixture, err := os.ReadFile("testdata/curator/spring-instance.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give          string
		service, id   string
		data          []byte
		metaBefore    string
		metaAfterDrop string
	}{
		{"a node Curator wrote", "quote-service", "7c0f5a2e-3d41-4a8e-9b51-2f6e1c9d8a10", fixture,
			`{"instance_status":"UP"}`, `{"instance_status":"OUT_OF_SERVICE","drained_by":"operator","drained_status":"UP"}`},
		{"a foreign Spring node", "quote", "j1", []byte(foreignSpringNode),
			`{"zone": "b","instance_status":"UP","version":"1.2"}`,
			`{"zone": "b","instance_status":"OUT_OF_SERVICE","version":"1.2","drained_by":"operator","drained_status":"UP"}`},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			for _, codec := range []sd.Codec{sd.CuratorCodec{}, sd.MixedCodec{}} {
				drained, err := sd.Drain(codec, tt.service, tt.id, tt.data)
				if err != nil {
					t.Fatal(err)
				}
				if want := bytes.Replace(tt.data, []byte(tt.metaBefore), []byte(tt.metaAfterDrop), 1); !bytes.Equal(drained, want) {
					t.Fatalf("drained:\n%s\nwant:\n%s", drained, want)
				}
				inst, err := sd.CuratorCodec{}.Decode(tt.service, tt.id, drained)
				if err != nil || inst.Status() != sd.StatusOutOfService || sd.OutOfServiceBy(inst) != sd.DrainedByOperator {
					t.Fatalf("drained node reads as %+v, %v", inst.Metadata, err)
				}
				again, err := sd.Drain(codec, tt.service, tt.id, drained)
				if err != nil || !bytes.Equal(again, drained) {
					t.Fatalf("a second drain changed the node:\n%s", again)
				}
				back, err := sd.Undrain(codec, tt.service, tt.id, drained)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(back, tt.data) {
					t.Fatalf("undrained:\n%s\nwant the original:\n%s", back, tt.data)
				}
			}
		})
	}
}

// Issue 31: undrain restores the status recorded at the drain: a node
// out of service before it was drained stays out, one UP comes back UP.
func TestUndrainRestoresTheRecordedStatus(t *testing.T) {
	out := strings.Replace(foreignSpringNode, `"instance_status":"UP"`, `"instance_status":"OUT_OF_SERVICE"`, 1)
	drained, err := sd.Drain(sd.CuratorCodec{}, "quote", "j1", []byte(out))
	if err != nil {
		t.Fatal(err)
	}
	back, err := sd.Undrain(sd.CuratorCodec{}, "quote", "j1", drained)
	if err != nil || string(back) != out {
		t.Fatalf("undrain of a node drained OUT_OF_SERVICE: %s, %v; want it as it was", back, err)
	}
	// A drain from before the status was recorded: undrain removes the
	// marker and leaves the status to the node's Registrar.
	legacy := strings.Replace(out, `"version":"1.2"`, `"version":"1.2","drained_by":"operator"`, 1)
	back, err = sd.Undrain(sd.CuratorCodec{}, "quote", "j1", []byte(legacy))
	if err != nil || string(back) != out {
		t.Fatalf("undrain of an unrecorded drain: %s, %v", back, err)
	}
	if back, err := sd.Undrain(sd.CuratorCodec{}, "quote", "j1", []byte(foreignSpringNode)); err != nil || string(back) != foreignSpringNode {
		t.Fatalf("undrain of a node not drained changed it: %s, %v", back, err)
	}
}

// Issue 31: what a drain cannot mark it refuses, and says why: a payload
// of another class (its readers see no instance_status, and it is not
// ours to rewrite), and the layouts that store no status.
func TestDrainRefusesWhatItCannotMark(t *testing.T) {
	foreign := strings.Replace(foreignSpringNode, sd.SpringInstanceClass, "com.example.discovery.InstanceDetails", 1)
	_, err := sd.Drain(sd.CuratorCodec{}, "quote", "j1", []byte(foreign))
	var fe *sd.ForeignPayloadError
	if !errors.As(err, &fe) || fe.Class != "com.example.discovery.InstanceDetails" {
		t.Fatalf("drain of an InstanceDetails node: %v, want a *ForeignPayloadError naming the class", err)
	}
	for _, tt := range []struct {
		codec sd.Codec
		child string
		data  string
	}{
		{sd.PlainCodec{}, "10.0.0.1:80", ""},
		{sd.GoKitCodec{}, "_c_0123-0000000001", "10.0.0.1:80"},
		{sd.MixedCodec{}, sd.GoKitTwinPrefix + "q1", "10.0.0.1:80"},
	} {
		if _, err := sd.Drain(tt.codec, "quote", tt.child, []byte(tt.data)); !errors.Is(err, sd.ErrNoStatus) {
			t.Errorf("drain of a %T node %s: %v, want ErrNoStatus", tt.codec, tt.child, err)
		}
	}
}

func TestStoresStatus(t *testing.T) {
	inst := sd.Instance{Name: "quote", ID: "q1", Address: "127.0.0.1", Port: 80}
	for _, tt := range []struct {
		codec sd.Codec
		want  bool
	}{{sd.CuratorCodec{}, true}, {sd.MixedCodec{}, true}, {sd.PlainCodec{}, false}, {sd.GoKitCodec{}, false}} {
		if got := sd.StoresStatus(tt.codec, inst); got != tt.want {
			t.Errorf("StoresStatus(%T) = %v, want %v", tt.codec, got, tt.want)
		}
	}
}

// Issue 31: the drain marks are no instance's own metadata: an instance
// registered with them would come up drained, or undo an undrain at its
// next expiry.
func TestNewRegistrarRefusesTheDrainMarks(t *testing.T) {
	for _, k := range []string{sd.MetadataDrainedBy, sd.MetadataDrainedStatus, sd.MetadataOutBy} {
		inst := sd.Instance{Name: "quote", ID: "q1", Address: "127.0.0.1", Port: 80, Metadata: map[string]string{k: "operator"}}
		_, err := sd.NewRegistrar(&sd.Client{}, inst)
		var ce *sd.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), k) {
			t.Errorf("metadata %s: %v, want a ConfigError naming it", k, err)
		}
	}
}
