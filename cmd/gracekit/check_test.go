package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/sd"
)

func checkJSON(t *testing.T, args ...string) (int, checkOutput) {
	t.Helper()
	code, out, stderr := gk(t, append(args, "-o", "json")...)
	if code == exitUsage {
		t.Fatalf("check: exit %d: %s", code, stderr)
	}
	var got checkOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	return code, got
}

func kinds(fs []finding) []string {
	var out []string
	for _, f := range fs {
		if !slices.Contains(out, f.Kind) {
			out = append(out, f.Kind)
		}
	}
	slices.Sort(out)
	return out
}

// Each case builds a registry with one thing wrong, under parents an admin
// locked down (world:anyone:r), so that nothing else is found.
func TestCheckFindsEachKind(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	conn := rawConn(t, c, true)
	eph := func(t *testing.T, p string, data []byte, acl []zk.ACL) {
		t.Helper()
		if _, err := conn.Create(p, data, zk.FlagEphemeral, acl); err != nil {
			t.Fatalf("create %s: %v", p, err)
		}
	}
	valid := func(svc, id string, port int) []byte { return curatorJSON(t, svc, id, "10.1.0.1", port) }
	tests := []struct {
		name  string
		build func(t *testing.T, base string) // base and base/quote exist, safe
		args  []string
		want  string // the one kind found, "" for none
		path  string // relative to base
	}{
		{
			name:  "nothing wrong",
			build: func(t *testing.T, base string) { eph(t, base+"/quote/q1", valid("quote", "q1", 1), safeACL) },
		},
		{
			name:  "a node that is not Curator JSON",
			build: func(t *testing.T, base string) { eph(t, base+"/quote/q1", []byte("hello"), safeACL) },
			want:  kindMalformed, path: "/quote/q1",
		},
		{
			name:  "a node whose id is not its name",
			build: func(t *testing.T, base string) { eph(t, base+"/quote/q1", valid("quote", "q2", 1), safeACL) },
			want:  kindMalformed, path: "/quote/q1",
		},
		{
			name: "a node nobody but its owner may read",
			build: func(t *testing.T, base string) {
				eph(t, base+"/quote/q1", valid("quote", "q1", 1), zk.DigestACL(zk.PermAll, "admin", "secret"))
			},
			want: kindUnreadable, path: "/quote/q1",
		},
		{
			name: "the same node read with the owner's credentials",
			build: func(t *testing.T, base string) {
				eph(t, base+"/quote/q1", valid("quote", "q1", 1), zk.DigestACL(zk.PermAll, "admin", "secret"))
			},
			args: []string{"-auth", "admin:secret"},
		},
		{
			name: "a service whose children nobody may list",
			build: func(t *testing.T, base string) {
				if _, err := conn.SetACL(base+"/quote", zk.DigestACL(zk.PermAll, "admin", "secret"), -1); err != nil {
					t.Fatal(err)
				}
			},
			want: kindUnreadable, path: "/quote",
		},
		{
			name: "a persistent instance node",
			build: func(t *testing.T, base string) {
				if _, err := conn.Create(base+"/quote/q1", valid("quote", "q1", 1), 0, safeACL); err != nil {
					t.Fatal(err)
				}
			},
			want: kindNotEphemeral, path: "/quote/q1",
		},
		{
			name: "a TTL instance node, whose ephemeralOwner is not 0 yet no session",
			build: func(t *testing.T, base string) {
				if _, err := conn.CreateTTL(base+"/quote/q1", valid("quote", "q1", 1), zk.FlagTTL, safeACL, time.Hour); err != nil {
					t.Fatal(err)
				}
			},
			want: kindNotEphemeral, path: "/quote/q1",
		},
		{
			name: "a container instance node",
			build: func(t *testing.T, base string) {
				if _, err := conn.CreateContainer(base+"/quote/q1", valid("quote", "q1", 1), zk.FlagContainer, safeACL); err != nil {
					t.Fatal(err)
				}
			},
			want: kindNotEphemeral, path: "/quote/q1",
		},
		{
			name: "one address and port under two ids",
			build: func(t *testing.T, base string) {
				eph(t, base+"/quote/q1", valid("quote", "q1", 7000), safeACL)
				eph(t, base+"/quote/q2", valid("quote", "q2", 7000), safeACL)
				eph(t, base+"/quote/q3", valid("quote", "q3", 7001), safeACL)
			},
			want: kindDuplicate, path: "/quote",
		},
		{
			name: "a service node anyone may write",
			build: func(t *testing.T, base string) {
				if _, err := conn.SetACL(base+"/quote", zk.WorldACL(zk.PermAll), -1); err != nil {
					t.Fatal(err)
				}
				eph(t, base+"/quote/q1", valid("quote", "q1", 1), safeACL)
			},
			want: kindOpenACL, path: "/quote",
		},
		{
			name: "a base path anyone may create services under",
			build: func(t *testing.T, base string) {
				if _, err := conn.SetACL(base, append(zk.WorldACL(zk.PermRead|zk.PermCreate), safeACL[1]), -1); err != nil {
					t.Fatal(err)
				}
			},
			want: kindOpenACL, path: "",
		},
		{
			name: "a children list near jute.maxbuffer",
			build: func(t *testing.T, base string) {
				for i := range 40 {
					id := fmt.Sprintf("%s-%02d", strings.Repeat("x", 87), i) // 90 bytes
					eph(t, base+"/quote/"+id, valid("quote", id, 1000+i), safeACL)
				}
			},
			args: []string{"-max-buffer", "4096"}, // 40 * (4+90) + 20 + 68 = 3848 > 75%
			want: kindChildrenSize, path: "/quote",
		},
		{
			name: "the same list under a larger buffer",
			build: func(t *testing.T, base string) {
				for i := range 40 {
					id := fmt.Sprintf("%s-%02d", strings.Repeat("x", 87), i)
					eph(t, base+"/quote/"+id, valid("quote", id, 1000+i), safeACL)
				}
			},
			args: []string{"-max-buffer", "8192"},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := basePath(fmt.Sprintf("check-%d", i))
			mkdirs(t, conn, base+"/quote", safeACL)
			tt.build(t, base)
			code, got := checkJSON(t, on(c, base, append([]string{"check"}, tt.args...)...)...)
			if tt.want == "" {
				if code != exitOK || len(got.Findings) != 0 {
					t.Fatalf("exit %d, findings %+v; want none", code, got.Findings)
				}
				return
			}
			if code != exitFindings || !slices.Equal(kinds(got.Findings), []string{tt.want}) {
				t.Fatalf("exit %d, findings %+v; want %s only", code, got.Findings, tt.want)
			}
			if f := got.Findings[0]; f.Path != base+tt.path || f.Detail == "" {
				t.Fatalf("finding %+v; want path %s", f, base+tt.path)
			}
			// -ignore drops the kind, and the exit status with it.
			if code, _ := checkJSON(t, on(c, base, append([]string{"check", "-ignore", tt.want}, tt.args...)...)...); code != exitOK {
				t.Fatalf("-ignore %s: exit %d", tt.want, code)
			}
		})
	}

	t.Run("text has a line per finding and a summary", func(t *testing.T) {
		base := basePath("check-text")
		mkdirs(t, conn, base+"/quote", safeACL)
		eph(t, base+"/quote/q1", []byte("hello"), safeACL)
		eph(t, base+"/quote/q2", valid("quote", "q2", 1), safeACL)
		code, out, _ := gk(t, on(c, base, "check")...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != exitFindings || len(lines) != 2 || !strings.HasPrefix(lines[0], "malformed") ||
			!strings.Contains(lines[0], base+"/quote/q1") || lines[1] != "1 finding in 1 services, 2 nodes under "+base {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
}

func TestCheckOnWhatGracekitRegistered(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	t.Run("with digest auth, gracekit's parents pass", func(t *testing.T) {
		base := basePath("check-gk-auth")
		cl := newClient(t, c, sd.DigestAuth("quote-team", "pw"))
		register(t, cl, base, sd.Instance{Name: "quote", ID: "q1", Address: "127.0.0.1", Port: 8081})
		register(t, cl, base, sd.Instance{Name: "quote", ID: "q2", Address: "127.0.0.1", Port: 8082})
		if code, got := checkJSON(t, on(c, base, "check")...); code != exitOK || got.Services != 1 || got.Nodes != 2 {
			t.Fatalf("exit %d: %+v", code, got)
		}
	})
	t.Run("without auth, every parent is open to anyone", func(t *testing.T) {
		base := basePath("check-gk-open")
		cl := newClient(t, c)
		register(t, cl, base, sd.Instance{Name: "quote", ID: "q1", Address: "127.0.0.1", Port: 8081})
		code, got := checkJSON(t, on(c, base, "check")...)
		var paths []string
		for _, f := range got.Findings {
			paths = append(paths, f.Kind+" "+f.Path)
		}
		want := []string{kindOpenACL + " " + base, kindOpenACL + " " + base + "/quote"}
		if code != exitFindings || !slices.Equal(paths, want) {
			t.Fatalf("exit %d, findings %v; want %v", code, paths, want)
		}
	})
}

// The estimate is the exact frame length a client compares with its
// buffer limit: go-zookeeper with that limit lists the service, and with
// one byte less it cannot.
func TestChildrenReplySizeIsTheFrameLength(t *testing.T) {
	t.Parallel()
	c := zkServer(t)
	dir := basePath("check-size") + "/quote"
	conn := rawConn(t, c, false)
	mkdirs(t, conn, dir, zk.WorldACL(zk.PermAll))
	var names []string
	for i := range 30 {
		name := fmt.Sprintf("instance-%03d-%s", i, strings.Repeat("é", i)) // bytes, not runes
		names = append(names, name)
		if _, err := conn.Create(dir+"/"+name, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	size := childrenReplySize(names)
	list := func(limit int) error {
		t.Helper()
		lc, _, err := zk.Connect(c.Addrs(), 4*time.Second, zk.WithLogInfo(false), zk.WithLogger(silent{}), zk.WithMaxBufferSize(limit))
		if err != nil {
			t.Fatal(err)
		}
		defer lc.Close()
		_, _, err = lc.Children(dir)
		return err
	}
	if err := list(size); err != nil {
		t.Fatalf("a buffer of %d bytes: %v", size, err)
	}
	if err := list(size - 1); err == nil {
		t.Fatalf("a buffer of %d bytes listed a reply estimated at %d", size-1, size)
	}
}
