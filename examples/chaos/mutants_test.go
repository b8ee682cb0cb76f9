package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gracekit/gracekit/internal/testutil"
)

// libDir is the library's module directory, found as the mutation mode
// finds it.
func libDir(t *testing.T) string {
	t.Helper()
	lib, err := libraryDir(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

// Every planted bug still applies to the library as it is (each text it
// replaces found exactly once) and the library's packages build with it
// and the failpoints' tag, so that the mutation mode never finds out at
// its run.
func TestEveryMutantAppliesAndBuilds(t *testing.T) {
	lib := libDir(t)
	for name := range plantedEdits {
		if _, ok := mutantNamed(name); !ok {
			t.Errorf("plantedEdits[%q] is no mutant's", name)
		}
	}
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			for _, e := range plantedEdits[m.name] {
				if !strings.Contains(e.new, plantedMarker) {
					t.Errorf("an edit of %s does not say %q: TestLibraryCarriesNoPlantedBug could not see it leak", e.file, plantedMarker)
				}
			}
			overlay, err := plant(lib, t.TempDir(), plantedEdits[m.name])
			if err != nil {
				t.Fatal(err)
			}
			// The packages the edits touch (their dependencies come from the
			// cache): linking cmd/... and provider for each mutant took most
			// of this test's 28 s in make test.
			// With the flags that built this test, so that only what the
			// tag and the overlay change compiles.
			args := append([]string{"build", "-tags", tagFailpoints, "-overlay", overlay}, testutil.GoBuildFlags()...)
			for _, e := range plantedEdits[m.name] {
				if dir := "./" + filepath.ToSlash(filepath.Dir(e.file)) + "/"; !slices.Contains(args, dir) {
					args = append(args, dir)
				}
			}
			cmd := exec.Command(goCmd(), args...)
			cmd.Dir = lib
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		})
	}
}

// plant refuses an edit that does not apply exactly once, and leaves the
// library's files as they are.
func TestPlantRefusesAnEditThatDoesNotApply(t *testing.T) {
	lib := t.TempDir()
	src := filepath.Join(lib, "p", "a.go")
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		t.Fatal(err)
	}
	const orig = "one two two\n"
	if err := os.WriteFile(src, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, edits := range map[string][]edit{
		"twice":        {{file: "p/a.go", old: "two", new: "2"}},
		"absent":       {{file: "p/a.go", old: "three", new: "3"}},
		"gone after":   {{file: "p/a.go", old: "one", new: "1"}, {file: "p/a.go", old: "one two", new: "x"}},
		"adds present": {{file: "p/a.go", new: "package p\n"}},
		"no file":      {{file: "p/b.go", old: "one", new: "1"}},
		"none":         nil,
	} {
		if _, err := plant(lib, t.TempDir(), edits); err == nil {
			t.Errorf("%s: planted", name)
		}
	}
	dir := t.TempDir()
	overlay, err := plant(lib, dir, []edit{{file: "p/a.go", old: "one", new: "1"}, {file: "p/a.go", old: "1 two", new: "x"}, {file: "p/c.go", new: "package p\n"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(overlay)
	if err != nil {
		t.Fatal(err)
	}
	var o struct{ Replace map[string]string }
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"p/a.go": "x two\n", "p/c.go": "package p\n"}
	if len(o.Replace) != len(want) {
		t.Errorf("overlay replaces %v, want %d files", o.Replace, len(want))
	}
	for f, text := range want {
		dst, ok := o.Replace[filepath.Join(lib, filepath.FromSlash(f))]
		if !ok || !strings.HasPrefix(dst, dir) {
			t.Errorf("overlay %v: %s not replaced by a file under %s", o.Replace, f, dir)
			continue
		}
		if got, _ := os.ReadFile(dst); string(got) != text {
			t.Errorf("%s planted as %q, want %q", f, got, text)
		}
	}
	if got, _ := os.ReadFile(src); string(got) != orig {
		t.Errorf("plant changed the library's file: %q", got)
	}
}

// The library carries no planted bug: no source file of its packages
// says "mutant" or "planted bug". The scan finds each mutant's edited
// files, so that it can fail.
func TestLibraryCarriesNoPlantedBug(t *testing.T) {
	lib := libDir(t)
	var roots []string
	for _, d := range []string{"sd", "shutdown", "internal", "cmd", "provider"} {
		roots = append(roots, filepath.Join(lib, d))
	}
	hits, err := plantedCode(roots...)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hits {
		t.Errorf("the library carries planted-bug code: %s", h)
	}
	for _, m := range mutants {
		dir := t.TempDir()
		if _, err := plant(lib, dir, plantedEdits[m.name]); err != nil {
			t.Fatal(err)
		}
		if hits, err := plantedCode(dir); err != nil || len(hits) == 0 {
			t.Errorf("%s: the scan finds nothing in its edited files (%v): it proves nothing", m.name, err)
		}
	}
}

// plantedCode is each line of a non-test Go file under roots that says
// "mutant" or plantedMarker, in any case, as file:line: text.
func plantedCode(roots ...string) ([]string, error) {
	var hits []string
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for i, line := range strings.Split(string(b), "\n") {
				l := strings.ToLower(line)
				if strings.Contains(l, "mutant") || strings.Contains(l, plantedMarker) {
					hits = append(hits, fmt.Sprintf("%s:%d: %s", p, i+1, strings.TrimSpace(line)))
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return hits, nil
}

// The overlay reaches the library as the gateway's build sees it, through
// the examples module's replace: the file dropdelete adds is one of sd's
// files for the gateway with the overlay, and not without. go list reads
// the build's view without compiling (linking the gateway twice took 18 s
// of make test).
func TestAPlantedBugReachesTheGatewaysBuild(t *testing.T) {
	const added = "planted_dropdelete.go"
	overlay, err := plant(libDir(t), t.TempDir(), plantedEdits["dropdelete"])
	if err != nil {
		t.Fatal(err)
	}
	sdFiles := func(overlay string) string {
		t.Helper()
		args := []string{"list", "-deps", "-f", `{{if eq .ImportPath "github.com/gracekit/gracekit/sd"}}{{join .GoFiles " "}}{{end}}`}
		if overlay != "" {
			args = append(args, "-overlay", overlay)
		}
		out, err := exec.Command(goCmd(), append(args, pkgGateway)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if files := sdFiles(""); strings.Contains(files, added) {
		t.Errorf("the gateway's sd without an overlay has %s, a planted bug's file: %s", added, files)
	}
	if files := sdFiles(overlay); !strings.Contains(files, added) {
		t.Errorf("the gateway's sd with dropdelete's overlay lacks %s: the overlay did not reach it: %s", added, files)
	}
}

func TestParseViolatedReadsPrintViolatedsLines(t *testing.T) {
	out := []byte("ROBUST seed=7 faults=3 checks=10 violations=3\n" +
		"VIOLATED seed=7 check=going-back n=2\nVIOLATED seed=7 check=phantom n=1\nRESULT mode=robustness\n")
	got := parseViolated(out)
	if got["going-back"] != 2 || got["phantom"] != 1 || len(got) != 2 {
		t.Fatalf("parseViolated = %v, want going-back=2 phantom=1", got)
	}
	nozxid, _ := mutantNamed("nozxid")
	if by := nozxid.caughtBy(got); by != "going-back" {
		t.Errorf("nozxid caught by %q, want going-back", by)
	}
	norecreate, _ := mutantNamed("norecreate")
	if by := norecreate.caughtBy(got); by != "" {
		t.Errorf("norecreate caught by %q: a violation of a validator not meant for it is no catch", by)
	}
}

func TestEveryMutantHasABiasedSchedule(t *testing.T) {
	if len(mutants) < 6 {
		t.Fatalf("%d planted bugs, want at least 6", len(mutants))
	}
	for _, m := range mutants {
		sh := testShape
		sh.bias = m.name
		s := newSchedule(1, sh)
		if len(s.Rounds) != sh.rounds {
			t.Fatalf("%s: %d rounds, want %d", m.name, len(s.Rounds), sh.rounds)
		}
		for _, rd := range s.Rounds {
			if len(rd.Steps) == 0 {
				t.Fatalf("%s: a round without faults: %s", m.name, s)
			}
		}
		if len(m.by) == 0 {
			t.Errorf("%s names no validator", m.name)
		}
	}
}

func TestFailpointSpecsAreDrawnFromTheSeed(t *testing.T) {
	if a, b := failpointSpec(5), failpointSpec(5); a != b {
		t.Fatal("one seed drew two failpoint specs")
	}
	armed := 0
	for seed := range int64(20) {
		if failpointSpec(seed) != "" {
			armed++
		}
	}
	if armed == 0 {
		t.Error("20 seeds armed no failpoint")
	}
}
