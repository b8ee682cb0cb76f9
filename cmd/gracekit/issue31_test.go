package main

import (
	"os"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/sd"
)

// foreignNode is a Spring-class node another writer made, with fields
// gracekit does not know, at the top and in the payload, its own metadata
// order and spaces.
const foreignNode = `{"name":"quote","id":"j1","address":"10.0.0.9","port":8080,"sslPort":null,` +
	`"payload":{"@class":"org.springframework.cloud.zookeeper.discovery.ZookeeperInstance","id":"j1","name":"quote",` +
	`"metadata":{"zone": "b","instance_status":"UP"},"x-extra":[1,{"a":null}]},` +
	`"registrationTimeUTC":1796006863698,"serviceType":"DYNAMIC","enabled":true,` +
	`"uriSpec":{"parts":[{"value":"scheme","variable":true},{"value":"://","variable":false},{"value":"address","variable":true},{"value":":","variable":false},{"value":"port","variable":true}]}}`

// Issue 31: gracekit drain and undrain against real ZooKeeper keep every
// byte of a node they do not own the fields of: the node Curator wrote
// (the fixture) and a foreign one come back byte for byte, and the
// Curator-written one, which no gracekit Registrar keeps, undrains to UP.
// A payload of another class is refused and left as it is.
func TestDrainKeepsForeignNodesAndUndrainsCuratorsToUp(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	base := basePath("drain-foreign")
	conn := rawConn(t, c, true)
	fixture, err := os.ReadFile("testdata/curator/spring-instance.json")
	if err != nil {
		t.Fatal(err)
	}
	const fixtureID = "7c0f5a2e-3d41-4a8e-9b51-2f6e1c9d8a10"
	nodes := []struct{ service, id, data string }{
		{"quote-service", fixtureID, string(fixture)},
		{"quote", "j1", foreignNode},
		{"quote", "j2", strings.ReplaceAll(foreignNode, `"j1"`, `"j2"`)}, // capacity for -min-up
		{"quote-service", "other", strings.ReplaceAll(string(fixture), fixtureID, "other")},
	}
	for _, n := range nodes {
		mkdirs(t, conn, base+"/"+n.service, safeACL)
		if _, err := conn.Create(base+"/"+n.service+"/"+n.id, []byte(n.data), zk.FlagEphemeral, safeACL); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes[:2] {
		p := base + "/" + n.service + "/" + n.id
		if code, out, stderr := gk(t, on(c, base, "drain", n.service, n.id, "-auth", "admin:secret")...); code != exitOK {
			t.Fatalf("drain %s: exit %d, %q %q", p, code, out, stderr)
		}
		data, _, err := conn.Get(p)
		if err != nil {
			t.Fatal(err)
		}
		inst, err := sd.CuratorCodec{}.Decode(n.service, n.id, data)
		if err != nil || inst.Status() != sd.StatusOutOfService || inst.Metadata[sd.MetadataDrainedBy] != sd.DrainedByOperator {
			t.Fatalf("%s drained: %s, %v", p, data, err)
		}
		if !strings.Contains(string(data), sd.SpringInstanceClass) || (n.id == "j1" && !strings.Contains(string(data), `"x-extra":[1,{"a":null}]},"registrationTimeUTC"`)) {
			t.Fatalf("%s drained lost bytes it does not own: %s", p, data)
		}
		if code, out, stderr := gk(t, on(c, base, "undrain", n.service, n.id, "-auth", "admin:secret")...); code != exitOK {
			t.Fatalf("undrain %s: exit %d, %q %q", p, code, out, stderr)
		}
		data, _, err = conn.Get(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != n.data {
			t.Fatalf("%s after drain and undrain:\n%s\nwant it byte for byte:\n%s", p, data, n.data)
		}
		if in := lsJSON(t, on(c, base, "ls", n.service, "-auth", "admin:secret")...).Services[0].Instances[0]; in.Status != string(sd.StatusUp) {
			t.Fatalf("%s after undrain: %+v, want UP", p, in)
		}
	}

	class := strings.ReplaceAll(strings.ReplaceAll(foreignNode, sd.SpringInstanceClass, "com.example.discovery.InstanceDetails"), `"j1"`, `"d1"`)
	if _, err := conn.Create(base+"/quote/d1", []byte(class), zk.FlagEphemeral, safeACL); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := gk(t, on(c, base, "drain", "quote", "d1", "-auth", "admin:secret")...)
	if code != exitRefused || !strings.Contains(stderr, "com.example.discovery.InstanceDetails") {
		t.Fatalf("drain of an InstanceDetails node: exit %d, %q; want refused, naming the class", code, stderr)
	}
	if data, _, _ := conn.Get(base + "/quote/d1"); string(data) != class {
		t.Fatalf("a refused drain changed the node: %s", data)
	}
}

// Issue 31: gracekit drain refuses to leave fewer than -min-up instances
// UP, saying how many are, and changes nothing; -force drains anyway;
// draining a drained instance again needs no capacity.
func TestDrainGuardsCapacity(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	base := basePath("drain-min-up")
	cl := newClient(t, c)
	register(t, cl, base, sd.Instance{Name: "quote", ID: "q1", Address: "127.0.0.1", Port: 8081})
	register(t, cl, base, sd.Instance{Name: "quote", ID: "q2", Address: "127.0.0.1", Port: 8082})
	status := func(id string) string {
		for _, in := range lsJSON(t, on(c, base, "ls", "quote")...).Services[0].Instances {
			if in.ID == id {
				return in.Status
			}
		}
		return ""
	}
	code, _, stderr := gk(t, on(c, base, "drain", "quote", "q1", "-min-up", "2")...)
	if code != exitRefused || !strings.Contains(stderr, "2 instances UP now") || !strings.Contains(stderr, "-min-up 2") {
		t.Fatalf("drain below -min-up 2: exit %d, %q; want refused, saying 2 are UP", code, stderr)
	}
	if status("q1") != string(sd.StatusUp) {
		t.Fatal("a refused drain changed the node")
	}
	if code, out, stderr := gk(t, on(c, base, "drain", "quote", "q1")...); code != exitOK {
		t.Fatalf("drain with q2 left UP: exit %d, %q %q", code, out, stderr)
	}
	code, _, stderr = gk(t, on(c, base, "drain", "quote", "q2")...)
	if code != exitRefused || !strings.Contains(stderr, "1 instances UP now") || !strings.Contains(stderr, "would leave 0") {
		t.Fatalf("drain of the last UP instance: exit %d, %q; want refused", code, stderr)
	}
	if status("q2") != string(sd.StatusUp) {
		t.Fatal("a refused drain changed the node")
	}
	if code, out, stderr := gk(t, on(c, base, "drain", "quote", "q2", "-force")...); code != exitOK {
		t.Fatalf("drain -force: exit %d, %q %q", code, out, stderr)
	}
	if status("q2") != string(sd.StatusOutOfService) {
		t.Fatal("drain -force did not drain")
	}
	if code, _, stderr := gk(t, on(c, base, "drain", "quote", "q1")...); code != exitOK {
		t.Fatalf("drain of a drained instance: exit %d, %q", code, stderr)
	}
}

// Issue 31: the CLI knows a migration: go-kit nodes and a gracekit
// provider's twins are listed as what they are (no MALFORMED), check
// finds nothing in them but reports a twin whose Curator node is gone, a
// go-kit node is drained only by deleting it (-delete, which says how it
// comes back), and a twin's drain is refused with the way to do it.
func TestTheCLIKnowsAMigration(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	base := basePath("migrate")
	conn := rawConn(t, c, true)
	mkdirs(t, conn, base+"/quote", safeACL)
	create := func(name, data string) {
		t.Helper()
		if _, err := conn.Create(base+"/quote/"+name, []byte(data), zk.FlagEphemeral, safeACL); err != nil {
			t.Fatal(err)
		}
	}
	create("q1", string(curatorJSON(t, "quote", "q1", "127.0.0.1", 8081)))
	create(sd.GoKitTwinPrefix+"q1", "127.0.0.1:8081")
	create("_c_0123456789abcdef0123456789abcdef-0000000001", "127.0.0.1:9001")
	create("_c_0123456789abcdef0123456789abcdef-0000000002", "127.0.0.1:9002")

	got := lsJSON(t, on(c, base, "ls", "quote")...).Services[0]
	if got.Layout != layoutMixed || len(got.Instances) != 4 {
		t.Fatalf("ls of a mixed service: %+v", got)
	}
	kinds := map[string]string{}
	for _, in := range got.Instances {
		if in.Status != string(sd.StatusUp) || in.Error != "" {
			t.Errorf("%s: %+v, want UP", in.ID, in)
		}
		kinds[in.ID] = in.Kind
		if in.Kind == nodeTwin && in.TwinOf != "q1" {
			t.Errorf("twin %s: twin_of %q", in.ID, in.TwinOf)
		}
	}
	if kinds["q1"] != nodeCurator || kinds[sd.GoKitTwinPrefix+"q1"] != nodeTwin || kinds["_c_0123456789abcdef0123456789abcdef-0000000001"] != nodeGoKit {
		t.Fatalf("kinds: %v", kinds)
	}
	if _, out, _ := gk(t, on(c, base, "ls", "quote")...); strings.Contains(out, "MALFORMED") || !strings.Contains(out, "twin of q1") {
		t.Fatalf("ls text:\n%s", out)
	}
	if code, out, stderr := gk(t, on(c, base, "check", "quote")...); code != exitOK {
		t.Fatalf("check of the project's own twins: exit %d\n%s%s", code, out, stderr)
	}
	// With -layout curator, as before, go-kit nodes are malformed.
	if code, _, _ := gk(t, on(c, base, "check", "quote", "-layout", "curator")...); code != exitFindings {
		t.Fatalf("check -layout curator: exit %d, want the go-kit nodes malformed", code)
	}

	code, _, stderr := gk(t, on(c, base, "drain", "quote", sd.GoKitTwinPrefix+"q1", "-auth", "admin:secret")...)
	if code != exitRefused || !strings.Contains(stderr, "the Curator node q1") {
		t.Fatalf("drain of a twin: exit %d, %q", code, stderr)
	}
	kit := "_c_0123456789abcdef0123456789abcdef-0000000001"
	code, _, stderr = gk(t, on(c, base, "drain", "quote", kit, "-auth", "admin:secret")...)
	if code != exitRefused || !strings.Contains(stderr, "-delete") {
		t.Fatalf("drain of a go-kit node without -delete: exit %d, %q", code, stderr)
	}
	code, out, stderr := gk(t, on(c, base, "drain", "quote", kit, "-delete", "-auth", "admin:secret")...)
	if code != exitOK || !strings.Contains(out, "comes back only when its provider registers again") {
		t.Fatalf("drain -delete of a go-kit node: exit %d, %q %q", code, out, stderr)
	}
	if ok, _, _ := conn.Exists(base + "/quote/" + kit); ok {
		t.Fatal("drain -delete left the go-kit node")
	}

	// The twin's instance gone: a real finding.
	if err := conn.Delete(base+"/quote/q1", -1); err != nil {
		t.Fatal(err)
	}
	code, res := checkJSON(t, on(c, base, "check", "quote")...)
	if code != exitFindings || len(res.Findings) != 1 || res.Findings[0].Kind != kindOrphanTwin {
		t.Fatalf("check with the twin's Curator node gone: exit %d, %+v", code, res.Findings)
	}
	// Twins apart from their Curator nodes: -curator-base says where.
	mkdirs(t, conn, base+"-curator/quote", safeACL)
	if _, err := conn.Create(base+"-curator/quote/q1", curatorJSON(t, "quote", "q1", "127.0.0.1", 8081), zk.FlagEphemeral, safeACL); err != nil {
		t.Fatal(err)
	}
	if code, res := checkJSON(t, on(c, base, "check", "quote", "-curator-base", base+"-curator")...); code != exitOK {
		t.Fatalf("check -curator-base: exit %d, %+v", code, res.Findings)
	}
}
