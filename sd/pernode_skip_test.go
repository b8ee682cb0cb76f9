package sd_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// make test's per-node pass (scripts/test.sh) leaves out the tests on its
// pernode_skip_tests list: the watch mode reaches only Instancers and
// Catalogs, so a test that makes neither would run twice the same way. The
// list is kept by hand; this keeps it honest. A listed test that makes an
// Instancer or a Catalog, itself or through any function of this package's
// tests it names, fails here, and so does an entry that names no test.
func TestThePerNodePassLeavesOutOnlyTestsThatWatchNothing(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile("../scripts/test.sh")
	if err != nil {
		t.Fatal(err)
	}
	entries := skipEntries(t, string(script))

	fset := token.NewFileSet()
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	funcs := map[string][]*ast.FuncDecl{} // by name: methods too (over-approximate)
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				funcs[fd.Name.Name] = append(funcs[fd.Name.Name], fd)
			}
		}
	}
	watchers := []string{"NewInstancer", "NewInstancerContext", "NewInstancerFallback", "NewCatalog"}
	// watchPath is the chain of names from name to a watcher, or nil.
	watchPath := func(name string) []string {
		prev := map[string]string{name: ""}
		queue := []string{name}
		for len(queue) > 0 {
			cur := queue[0]
			queue = queue[1:]
			for _, fd := range funcs[cur] {
				var hit string
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					id, ok := n.(*ast.Ident)
					if !ok || hit != "" {
						return hit == ""
					}
					if slices.Contains(watchers, id.Name) {
						hit = id.Name
						return false
					}
					if _, seen := prev[id.Name]; !seen && len(funcs[id.Name]) > 0 {
						prev[id.Name] = cur
						queue = append(queue, id.Name)
					}
					return true
				})
				if hit != "" {
					chain := []string{hit}
					for at := cur; at != ""; at = prev[at] {
						chain = append([]string{at}, chain...)
					}
					return chain
				}
			}
		}
		return nil
	}

	for _, e := range entries {
		re, err := regexp.Compile("^(" + e + ")$")
		if err != nil {
			t.Errorf("scripts/test.sh pernode_skip_tests: %q: %v", e, err)
			continue
		}
		matched := 0
		for name := range funcs {
			if !strings.HasPrefix(name, "Test") || !re.MatchString(name) {
				continue
			}
			matched++
			if chain := watchPath(name); chain != nil {
				t.Errorf("%s is on scripts/test.sh's pernode_skip_tests but watches (%s): take it off the list, or the per-node mode never runs it",
					name, strings.Join(chain, " -> "))
			}
		}
		if matched == 0 {
			t.Errorf("scripts/test.sh pernode_skip_tests: %q names no test of sd: a renamed test would run twice unseen; fix the entry", e)
		}
	}
}

// skipEntries is the words of the pernode_skip_tests=( ... ) array, its
// comments and quotes left out.
func skipEntries(t *testing.T, script string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(script, "\npernode_skip_tests=(")
	body, _, ok2 := strings.Cut(rest, "\n)")
	if !ok || !ok2 {
		t.Fatal("scripts/test.sh has no pernode_skip_tests=( ... ) array")
	}
	var entries []string
	for _, line := range strings.Split(body, "\n") {
		line, _, _ = strings.Cut(line, "#")
		for _, w := range strings.Fields(line) {
			entries = append(entries, strings.Trim(w, `'"`))
		}
	}
	if len(entries) == 0 {
		t.Fatal("scripts/test.sh's pernode_skip_tests is empty")
	}
	return entries
}
