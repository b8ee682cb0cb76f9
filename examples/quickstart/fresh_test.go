package quickstart_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/gracekit/gracekit/internal/testutil"
)

// docPrograms returns every ```go block that is a program (a "package
// main" line) in README.md and docs/*.md, by "file#n".
func docPrograms(t *testing.T) map[string]string {
	t.Helper()
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{"../../README.md"}, pages...)
	out := map[string]string{}
	for _, page := range pages {
		doc, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		var cur *strings.Builder
		n := 0
		for _, line := range strings.Split(string(doc), "\n") {
			trimmed := strings.TrimSpace(line)
			switch {
			case cur == nil && trimmed == "```go":
				cur = new(strings.Builder)
			case cur != nil && trimmed == "```":
				if b := cur.String(); strings.Contains("\n"+b, "\npackage main\n") {
					n++
					out[fmt.Sprintf("%s#%d", filepath.Base(page), n)] = b
				}
				cur = nil
			case cur != nil:
				cur.WriteString(line + "\n")
			}
		}
	}
	return out
}

// Issue 32: every program in README.md and docs/ tidies and builds in a
// new module of its own, outside the repo, as a user makes one: go mod
// init, a replace of the library to this checkout, go mod tidy, go build,
// with the machine's module cache and proxy. go-kit v0.13.0 requires the
// monolithic genproto of 2021; unless the library's go.mod raises it, tidy
// fails with "ambiguous import" for google.golang.org/genproto/googleapis/
// rpc/status. The modules tidy in parallel (each is a separate process).
func TestEveryDocProgramBuildsInAFreshModule(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	progs := docPrograms(t)
	if len(progs) < 5 {
		t.Fatalf("found %d programs in README.md and docs/, want at least the five quickstarts", len(progs))
	}
	names := make([]string, 0, len(progs))
	for name := range progs {
		names = append(names, name)
	}
	sort.Strings(names)
	// The flags that built this test (-race, -trimpath, as make test
	// sets them) key these builds as its own: they reuse its compile of
	// the library and every dependency instead of compiling them again.
	goflags := testutil.GoFlags("-mod=mod")
	errs := make([]string, len(names))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 3)
	for i, name := range names {
		dir := filepath.Join(t.TempDir(), "m")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(progs[name]), 0o644); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			for _, args := range [][]string{
				{"mod", "init", "example.com/user"},
				{"mod", "edit", "-replace", "github.com/gracekit/gracekit=" + root},
				{"mod", "tidy"},
				{"build", "-o", os.DevNull, "."},
			} {
				cmd := exec.Command("go", args...)
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS="+goflags)
				if out, err := cmd.CombinedOutput(); err != nil {
					errs[i] = fmt.Sprintf("%s: go %s in a fresh module: %v\n%s", name, strings.Join(args, " "), err, out)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != "" {
			t.Error(e)
		}
	}
}
