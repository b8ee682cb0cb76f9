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
// new module of its own, outside the repo, with the machine's module cache
// and proxy, the two ways a user makes one:
//   - as the README says: go mod init, go get the library (here a require
//     replaced by this checkout), go mod tidy, go build;
//   - straight to go mod tidy after go mod init and the replace, which
//     looks each other import (grpc, fx) up at its newest version. go-kit
//     v0.13.0 requires the monolithic genproto of 2021; unless the
//     library's go.mod raises it, this tidy fails with "ambiguous import"
//     for google.golang.org/genproto/googleapis/rpc/status.
//
// Only the first builds (readmeBinaries builds the quickstart files so):
// it takes the library's versions, which this test's own build compiled.
// Building the second compiled grpc, protobuf and what imports them again
// at their newest releases, most of this test's CPU on a cold cache, and
// would turn make test red on an upstream release with no change here.
// The modules run in parallel (each go command is a separate process).
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
	var wg sync.WaitGroup
	sem := make(chan struct{}, 3)
	replace := "github.com/gracekit/gracekit=" + root
	ways := []struct {
		name  string
		steps [][]string
	}{
		{"as the README says", [][]string{
			{"mod", "init", "example.com/user"},
			{"mod", "edit", "-require", "github.com/gracekit/gracekit@v0.0.0-00010101000000-000000000000", "-replace", replace},
			{"mod", "tidy"},
			{"build", "-o", os.DevNull, "."},
		}},
		{"tidied straight away", [][]string{
			{"mod", "init", "example.com/user"},
			{"mod", "edit", "-replace", replace},
			{"mod", "tidy"},
		}},
	}
	// The quickstart files among the programs (every one, as long as
	// TestREADMEProgramsAreTheQuickstartFiles passes) are built the
	// README's way once, by readmeBinaries, for the tests that run them.
	quickstart := map[string]bool{}
	for _, src := range files(t) {
		quickstart[src] = true
	}
	readmeBinaries(t)
	errs := make([]string, len(names)*len(ways))
	for i, name := range names {
		for k, way := range ways {
			if k == 0 && quickstart[progs[name]] {
				continue
			}
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
				for _, args := range way.steps {
					cmd := exec.Command("go", args...)
					cmd.Dir = dir
					cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS="+goflags)
					if out, err := cmd.CombinedOutput(); err != nil {
						errs[i*len(ways)+k] = fmt.Sprintf("%s, %s: go %s in a fresh module: %v\n%s", name, way.name, strings.Join(args, " "), err, out)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	for _, e := range errs {
		if e != "" {
			t.Error(e)
		}
	}
}
