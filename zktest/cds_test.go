package zktest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The first server finds no class archive and dumps one at its close; the
// JVM maps it (-Xshare:on fails when it cannot); the next server maps it
// and dumps none.
func TestTheClassArchiveIsDumpedOnceThenMapped(t *testing.T) {
	dir := t.TempDir()
	old := cacheDir
	cacheDir = func() (string, error) { return dir, nil }
	t.Cleanup(func() { cacheDir = old })

	c := New(t)
	if !c.Servers[0].dumps.Load() {
		t.Fatal("the first server does not dump the class archive")
	}
	java, cp, err := Runtime()
	if err != nil {
		t.Fatal(err)
	}
	path, ok := cdsPath(java, cp, DefaultJVMArgs)
	if !ok {
		t.Fatal("no archive path")
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatal("the archive exists before the dumping JVM exited")
	}
	_ = c.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no archive after the first server's close: %v", err)
	}
	if tmps, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*.tmp")); len(tmps) > 0 {
		t.Errorf("left behind: %v", tmps)
	}
	args := append(slices.Clone(DefaultJVMArgs), "-Xshare:on", "-XX:SharedArchiveFile="+path, "-cp", cp, "-version")
	if out, err := exec.Command(java, args...).CombinedOutput(); err != nil {
		t.Fatalf("the JVM does not map the archive: %v\n%s", err, out)
	}

	c2 := New(t)
	if c2.Servers[0].dumps.Load() {
		t.Error("a server dumps the archive again")
	}
	if got, _ := cdsArgs(java, cp, DefaultJVMArgs); !slices.Equal(got, []string{"-XX:SharedArchiveFile=" + path}) {
		t.Errorf("flags %q, want the archive mapped", got)
	}
}

// An archive is named by what it depends on: another jar, a changed jar or
// other JVM sizes get another one. A killed dump leaves nothing.
func TestTheClassArchiveFollowsWhatItDependsOn(t *testing.T) {
	dir := t.TempDir()
	old := cacheDir
	cacheDir = func() (string, error) { return dir, nil }
	t.Cleanup(func() { cacheDir = old })
	jdk := filepath.Join(dir, "jdk")
	java := filepath.Join(jdk, "bin", "java")
	jar := filepath.Join(dir, "zk.jar")
	for _, f := range []string{java, filepath.Join(jdk, "lib", "modules"), jar} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base, ok := cdsPath(java, jar, DefaultJVMArgs)
	if !ok {
		t.Fatal("no path")
	}
	if p, _ := cdsPath(java, jar, append(slices.Clone(DefaultJVMArgs), "-Dznode.container.checkIntervalMs=100")); p != base {
		t.Error("a system property changed the archive")
	}
	if p, _ := cdsPath(java, jar, []string{"-Xmx1g"}); p == base {
		t.Error("other -X options share the archive")
	}
	if _, ok := cdsPath(java, jar+string(os.PathListSeparator)+filepath.Join(dir, "missing.jar"), nil); ok {
		t.Error("a missing jar has an archive")
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(jar, later, later); err != nil {
		t.Fatal(err)
	}
	if p, _ := cdsPath(java, jar, DefaultJVMArgs); p == base {
		t.Error("a changed jar keeps the archive")
	}

	args, done := cdsArgs(java, jar, DefaultJVMArgs)
	if len(args) != 1 || !strings.HasPrefix(args[0], "-XX:ArchiveClassesAtExit=") || done == nil {
		t.Fatalf("flags %q, want a dump", args)
	}
	if again, _ := cdsArgs(java, jar, DefaultJVMArgs); again != nil {
		t.Errorf("a second JVM dumps too: %q", again)
	}
	tmp := strings.TrimPrefix(args[0], "-XX:ArchiveClassesAtExit=")
	if err := os.WriteFile(tmp, []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	done(false) // killed
	path, _ := cdsPath(java, jar, DefaultJVMArgs)
	for _, p := range []string{tmp, path} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is there after a killed dump", p)
		}
	}
	if args, done := cdsArgs(java, jar, DefaultJVMArgs); len(args) != 1 || !strings.HasPrefix(args[0], "-XX:ArchiveClassesAtExit=") {
		t.Errorf("flags %q after a killed dump, want another dump", args)
	} else if done != nil {
		done(false)
	}
}
