package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func goCmd() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// Every planted bug builds: the library's packages with its tag (and the
// failpoints'), so that the mutation mode never finds out at its run.
func TestEveryMutantTagBuilds(t *testing.T) {
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			cmd := exec.Command(goCmd(), "build", "-tags", tagFailpoints+","+tagMutant+m.name, "./sd/", "./shutdown/", "./internal/...")
			cmd.Dir = filepath.Join("..", "..") // the library's module
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build -tags %s%s: %v\n%s", tagMutant, m.name, err, out)
			}
		})
	}
}

// The untagged build carries no planted bug: the linker keeps none of the
// bugs' bodies in a gateway built without tags, and keeps one in a gateway
// built with that bug's tag (so that the check can fail).
func TestUntaggedBuildHasNoMutantCode(t *testing.T) {
	nm := func(tags string) string {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "gateway")
		args := []string{"build", "-o", bin}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		out, err := exec.Command(goCmd(), append(args, pkgGateway)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go build %v: %v\n%s", args, err, out)
		}
		out, err = exec.Command(goCmd(), "tool", "nm", bin).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool nm: %v\n%s", err, out)
		}
		return string(out)
	}
	bodies := []string{"sd.dropDeletion", "sd.(*Instancer).publishUnread"}
	plain := nm("")
	for _, b := range bodies {
		if strings.Contains(plain, b) {
			t.Errorf("the untagged gateway holds %s, a planted bug's body", b)
		}
	}
	if tagged := nm(tagMutant + "noreread"); !strings.Contains(tagged, "sd.(*Instancer).publishUnread") {
		t.Errorf("a gateway built with %snoreread lacks sd.(*Instancer).publishUnread: the check above proves nothing", tagMutant)
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
