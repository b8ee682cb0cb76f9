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
// pernode_skip_tests list: the default watch mode reaches only Instancers
// and Catalogs made without WithWatchMode, so a test that makes none would
// run twice the same way. The list is kept by hand; this keeps it honest.
// A listed test that makes an Instancer or a Catalog in the default mode,
// itself or through any function of this package's tests it names, fails
// here, and so does an entry that names no test.
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
	var parsed []*ast.File
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, af)
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				funcs[fd.Name.Name] = append(funcs[fd.Name.Name], fd)
			}
		}
	}
	watchers := []string{"NewInstancer", "NewInstancerContext", "NewInstancerFallback", "NewCatalog"}
	// A watcher made with WithWatchMode (or a variable of this package's
	// tests set to one, as recursive is) runs the same in both passes.
	pins := map[string]bool{"WithWatchMode": true}
	for _, af := range parsed {
		ast.Inspect(af, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok {
				for i, v := range vs.Values {
					if mentions(v, pins) && i < len(vs.Names) {
						pins[vs.Names[i].Name] = true
					}
				}
			}
			return true
		})
	}
	// watchPath is the chain of names from name to a watcher made in the
	// default mode, or nil. pinned says that name's caller pinned the mode
	// in the options name forwards (opts...).
	type visit struct {
		name   string
		pinned bool
	}
	seen := map[visit]bool{}
	var watchPath func(name string, pinned bool) []string
	watchPath = func(name string, pinned bool) []string {
		if seen[visit{name, pinned}] {
			return nil
		}
		seen[visit{name, pinned}] = true
		for _, fd := range funcs[name] {
			var chain []string
			var inspect func(n ast.Node) bool
			inspect = func(n ast.Node) bool {
				if chain != nil {
					return false
				}
				switch n := n.(type) {
				case *ast.CallExpr:
					callee := ""
					switch f := n.Fun.(type) {
					case *ast.Ident:
						callee = f.Name
					case *ast.SelectorExpr:
						callee = f.Sel.Name
						ast.Inspect(f.X, inspect)
					default:
						ast.Inspect(n.Fun, inspect)
					}
					argPin := slices.ContainsFunc(n.Args, func(a ast.Expr) bool { return mentions(a, pins) })
					switch {
					case slices.Contains(watchers, callee):
						if !argPin && !(pinned && n.Ellipsis.IsValid()) {
							chain = []string{name, callee}
							return false
						}
					case len(funcs[callee]) > 0:
						if sub := watchPath(callee, argPin); sub != nil {
							chain = append([]string{name}, sub...)
							return false
						}
					}
					for _, a := range n.Args {
						ast.Inspect(a, inspect)
					}
					return false
				case *ast.Ident: // a function passed as a value
					if len(funcs[n.Name]) > 0 {
						if sub := watchPath(n.Name, false); sub != nil {
							chain = append([]string{name}, sub...)
						}
					}
				}
				return true
			}
			ast.Inspect(fd.Body, inspect)
			if chain != nil {
				return chain
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
			if chain := watchPath(name, false); chain != nil {
				t.Errorf("%s is on scripts/test.sh's pernode_skip_tests but watches in the default mode (%s): take it off the list, or the per-node mode never runs it",
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

// mentions says whether n names any of names.
func mentions(n ast.Node, names map[string]bool) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && names[id.Name] {
			found = true
		}
		return !found
	})
	return found
}
