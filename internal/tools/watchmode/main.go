// Command watchmode prints, as a go test -run pattern, the tests, examples
// and fuzz targets of a package's test files that make an sd Instancer or
// Catalog in the default watch mode: make test's per-node pass runs those
// alone. The mode the pass sets (sd.SetDefaultWatchMode) reaches nothing
// else, so every other test would run twice the same way, and the JVMs
// they start (ensembles, TLS servers, Curator) cost the suite minutes of
// CPU. Worked out from the source, so that no list kept by hand can leave
// out a new test that watches.
//
// A watcher made with sd.WithWatchMode in its options, or with a variable
// of the package's tests set to one, is pinned; so is one made by a helper
// that forwards its caller's options (opts...) when the caller pinned
// them. A function that names a function of the test files, called or
// passed as a value, reaches what that one reaches.
//
// Usage: watchmode DIR
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: watchmode DIR (prints a go test -run pattern)")
		os.Exit(2)
	}
	names, err := defaultModeWatchers(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "watchmode:", err)
		os.Exit(1)
	}
	if len(names) == 0 {
		fmt.Fprintf(os.Stderr, "watchmode: no test in %s makes a watcher in the default mode: is it sd's directory?\n", os.Args[1])
		os.Exit(1)
	}
	fmt.Printf("^(%s)$\n", strings.Join(names, "|"))
}

// watchers are sd's constructors whose mode defaults to the default mode,
// newInstancer among them: sd's own, which its internal tests call (and
// the name of the external tests' helper, which is one in effect).
var watchers = []string{"NewInstancer", "NewInstancerContext", "NewInstancerFallback", "NewCatalog", "newInstancer"}

// defaultModeWatchers returns the sorted names of dir's top-level tests,
// examples and fuzz targets that reach a watcher made in the default mode.
func defaultModeWatchers(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s has no test files", dir)
	}
	fset := token.NewFileSet()
	funcs := map[string][]*ast.FuncDecl{} // by name, methods too (over-approximate)
	pins := map[string]bool{"WithWatchMode": true}
	var parsed []*ast.File
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			return nil, err
		}
		parsed = append(parsed, af)
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				funcs[fd.Name.Name] = append(funcs[fd.Name.Name], fd)
			}
		}
	}
	// Variables set to a pinned option (var recursive = sd.WithWatchMode(...)).
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
	r := &reach{funcs: funcs, pins: pins, memo: map[visit]bool{}}
	var out []string
	for name := range funcs {
		if isTopLevel(name) && r.watches(name, false) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

func isTopLevel(name string) bool {
	for _, p := range []string{"Test", "Example", "Fuzz"} {
		if rest, ok := strings.CutPrefix(name, p); ok && (rest == "" || !('a' <= rest[0] && rest[0] <= 'z')) {
			return name != "TestMain"
		}
	}
	return false
}

type visit struct {
	name   string
	pinned bool // the caller pinned the options name forwards
}

type reach struct {
	funcs map[string][]*ast.FuncDecl
	pins  map[string]bool
	memo  map[visit]bool
}

// watches says whether name reaches a watcher made in the default mode.
func (r *reach) watches(name string, pinned bool) bool {
	v := visit{name, pinned}
	if done, ok := r.memo[v]; ok {
		return done
	}
	r.memo[v] = false // a cycle reaches nothing more
	found := false
	var inspect func(n ast.Node) bool
	inspect = func(n ast.Node) bool {
		if found {
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
			argPin := slices.ContainsFunc(n.Args, func(a ast.Expr) bool { return mentions(a, r.pins) })
			switch {
			case slices.Contains(watchers, callee):
				found = !argPin && !(pinned && n.Ellipsis.IsValid())
			case len(r.funcs[callee]) > 0:
				found = r.watches(callee, argPin)
			}
			for _, a := range n.Args {
				ast.Inspect(a, inspect)
			}
			return false
		case *ast.Ident: // a function passed as a value
			if len(r.funcs[n.Name]) > 0 {
				found = r.watches(n.Name, false)
			}
		}
		return !found
	}
	for _, fd := range r.funcs[name] {
		ast.Inspect(fd.Body, inspect)
	}
	r.memo[v] = found
	return found
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
