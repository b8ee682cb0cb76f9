package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/sd"
)

func lsJSON(t *testing.T, args ...string) lsOutput {
	t.Helper()
	code, out, stderr := gk(t, append(args, "-o", "json")...)
	if code != exitOK {
		t.Fatalf("ls: exit %d: %s", code, stderr)
	}
	var got lsOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	return got
}

func TestLsShowsWhatGracekitRegistered(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	base := basePath("ls-gracekit")
	cl := newClient(t, c)
	before := time.Now()
	r1 := register(t, cl, base, sd.Instance{Name: "quote", ID: "quote-1", Address: "127.0.0.1", Port: 8081})
	r2 := register(t, cl, base, sd.Instance{Name: "quote", ID: "quote-2", Address: "127.0.0.1", Port: 8082, SSLPort: 8443})
	register(t, cl, base, sd.Instance{Name: "orders", ID: "orders-1", Address: "10.0.0.9", Port: 9000})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r2.SetStatus(ctx, sd.StatusOutOfService); err != nil {
		t.Fatal(err)
	}

	got := lsJSON(t, on(c, base, "ls")...)
	if got.BasePath != base || len(got.Services) != 2 || got.Services[0].Name != "orders" || got.Services[1].Name != "quote" {
		t.Fatalf("services %+v", got.Services)
	}
	quote := got.Services[1]
	if len(quote.Instances) != 2 || quote.Path != base+"/quote" || !quote.Exists {
		t.Fatalf("quote %+v", quote)
	}
	for i, tt := range []struct {
		r      *sd.Registrar
		port   int
		ssl    int
		status string
	}{{r1, 8081, 0, "UP"}, {r2, 8082, 8443, "OUT_OF_SERVICE"}} {
		in := quote.Instances[i]
		wantReg := tt.r.Instance().RegistrationTime.UTC().Truncate(time.Millisecond)
		switch {
		case in.ID != tt.r.Instance().ID || in.Path != tt.r.Path() || in.Address != "127.0.0.1" || in.Port != tt.port || in.SSLPort != tt.ssl:
			t.Errorf("instance %d: %+v", i, in)
		case in.Status != tt.status:
			t.Errorf("%s: status %q, want %q", in.ID, in.Status, tt.status)
		case in.Registered == nil || !in.Registered.Equal(wantReg):
			t.Errorf("%s: registered %v, want %v", in.ID, in.Registered, wantReg)
		case in.Owner != hex(cl.SessionID()) || in.OwnerKind != ownerSession || !in.Creator:
			t.Errorf("%s: owner %q (%s, creator %v), want %s, a session, the creator", in.ID, in.Owner, in.OwnerKind, in.Creator, hex(cl.SessionID()))
		case in.Czxid != tt.r.Czxid():
			t.Errorf("%s: czxid %d, want the Registrar's %d", in.ID, in.Czxid, tt.r.Czxid())
		case in.AgeSeconds < 0 || in.AgeSeconds > time.Since(before).Seconds()+60:
			t.Errorf("%s: age %vs", in.ID, in.AgeSeconds)
		case in.Metadata[sd.MetadataStatus] != tt.status || in.Error != "":
			t.Errorf("%s: metadata %v, error %q", in.ID, in.Metadata, in.Error)
		}
	}

	t.Run("text names one service's instances, one line each", func(t *testing.T) {
		code, out, stderr := gk(t, on(c, base, "ls", "quote")...)
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "SERVICE") {
			t.Fatalf("got\n%s", out)
		}
		for _, want := range [][]string{
			{"quote", "quote-1", "127.0.0.1", "8081", "UP", "yes", hex(cl.SessionID())},
			{"quote", "quote-2", "8082", "OUT_OF_SERVICE", "yes"},
		} {
			line := lines[1]
			if want[1] == "quote-2" {
				line = lines[2]
			}
			for _, w := range want {
				if !strings.Contains(line, w) {
					t.Errorf("line %q lacks %q", line, w)
				}
			}
		}
	})
	t.Run("a service with no node exits 1 and names those there", func(t *testing.T) {
		code, out, stderr := gk(t, on(c, base, "ls", "nobody", "-o", "json")...)
		want := `gracekit: no service "nobody" under ` + base + ` (services there: orders, quote)`
		if code != exitNoService || strings.TrimSpace(stderr) != want || out != "" {
			t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and %q", code, out, stderr, want)
		}
	})
	t.Run("a node that is not an instance is listed as such", func(t *testing.T) {
		conn := rawConn(t, c, false)
		if _, err := conn.Create(base+"/orders/junk", []byte("{"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		got := lsJSON(t, on(c, base, "ls", "orders")...)
		ins := got.Services[0].Instances
		if len(ins) != 2 || ins[0].ID != "junk" || ins[0].Status != statusMalformed || ins[0].Error == "" || ins[0].Owner != hex(conn.SessionID()) {
			t.Fatalf("%+v", ins)
		}
	})
}

// The recorded Curator nodes, as a Spring Cloud Zookeeper service leaves
// them, read field by field.
func TestLsReadsCuratorFixtures(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	base := basePath("ls-curator")
	conn := rawConn(t, c, true)
	mkdirs(t, conn, base+"/quote-service", safeACL)
	for _, name := range []string{"spring-instance.json", "spring-instance-sslport.json"} {
		data, err := os.ReadFile("testdata/curator/" + name)
		if err != nil {
			t.Fatal(err)
		}
		var n struct{ ID string }
		if err := json.Unmarshal(data, &n); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Create(base+"/quote-service/"+n.ID, data, zk.FlagEphemeral, safeACL); err != nil {
			t.Fatal(err)
		}
	}
	got := lsJSON(t, on(c, base, "ls")...)
	if len(got.Services) != 1 || len(got.Services[0].Instances) != 2 {
		t.Fatalf("%+v", got.Services)
	}
	ins := got.Services[0].Instances // sorted by id
	want := []struct {
		id      string
		addr    string
		port    int
		ssl     int
		regMs   int64
		zone    string
		hasZone bool
	}{
		{"0b9e4c7d-8f21-4e63-a5d0-6c3b2a1f9e87", "10.0.0.13", 8080, 8443, 1796006863704, "eu-1b", true},
		{"7c0f5a2e-3d41-4a8e-9b51-2f6e1c9d8a10", "10.0.0.12", 8081, 0, 1796006863698, "", false},
	}
	for i, w := range want {
		in := ins[i]
		zone, hasZone := in.Metadata["zone"]
		if in.ID != w.id || in.Address != w.addr || in.Port != w.port || in.SSLPort != w.ssl || in.Status != "UP" ||
			in.Registered == nil || in.Registered.UnixMilli() != w.regMs || zone != w.zone || hasZone != w.hasZone ||
			in.Owner != hex(conn.SessionID()) || !in.Creator || in.Error != "" {
			t.Errorf("instance %d: %+v", i, in)
		}
	}
	// Age counts from registrationTimeUTC, not from when the node was made.
	now := got.Time
	for i, in := range ins {
		if want := now.Sub(time.UnixMilli(want[i].regMs)).Seconds(); in.AgeSeconds < want-1 || in.AgeSeconds > want+1 {
			t.Errorf("%s: age %vs, want about %vs", in.ID, in.AgeSeconds, want)
		}
	}
	// Curator's own nodes, under parents an admin locked down, are clean.
	if code, out, stderr := gk(t, on(c, base, "check")...); code != exitOK {
		t.Fatalf("check: exit %d:\n%s%s", code, out, stderr)
	}
}
