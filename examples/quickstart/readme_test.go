// Package quickstart_test keeps the README's programs and the files under
// examples/quickstart one and the same: `make build` builds the files, and
// this test fails when a README block drifts from its file.
package quickstart_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// pages returns README.md and docs/*.md, joined: the README leads with
// the fx quickstarts and sends the others to docs/ pages.
func pages(t *testing.T) []byte {
	t.Helper()
	names, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var doc []byte
	for _, name := range append([]string{"../../README.md"}, names...) {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		doc = append(append(doc, b...), '\n')
	}
	return doc
}

// programs returns the ```go blocks of the README and docs/ that are
// whole programs (a "package main" line), in order.
func programs(t *testing.T) []string {
	t.Helper()
	doc := pages(t)
	var out []string
	var cur *strings.Builder
	for _, line := range strings.Split(string(doc), "\n") {
		switch {
		case cur == nil && line == "```go":
			cur = new(strings.Builder)
		case cur != nil && line == "```":
			if b := cur.String(); strings.Contains("\n"+b, "\npackage main\n") {
				out = append(out, b)
			}
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return out
}

func files(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob("*/main.go")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no examples/quickstart/*/main.go (err: %v)", err)
	}
	out := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = string(b)
	}
	return out
}

// Every program in the README is one of the files, verbatim, and every
// file is in the README once.
func TestREADMEProgramsAreTheQuickstartFiles(t *testing.T) {
	fs := files(t)
	shown := map[string]int{}
	for i, block := range programs(t) {
		match := ""
		for p, src := range fs {
			if src == block {
				match = p
			}
		}
		if match == "" {
			t.Errorf("program %d of README.md and docs/ is none of examples/quickstart/*/main.go; it differs from its closest file at:\n%s", i+1, closest(block, fs))
			continue
		}
		shown[match]++
	}
	for p := range fs {
		if shown[p] != 1 {
			t.Errorf("examples/quickstart/%s is shown %d times in README.md and docs/, want once", p, shown[p])
		}
	}
}

// closest names the file sharing the longest first lines with block, and
// the first line where they part.
func closest(block string, fs map[string]string) string {
	bl := strings.Split(block, "\n")
	best, bestN := "", -1
	for p, src := range fs {
		sl := strings.Split(src, "\n")
		n := 0
		for n < len(bl) && n < len(sl) && bl[n] == sl[n] {
			n++
		}
		if n > bestN {
			best, bestN = p, n
		}
	}
	sl := strings.Split(fs[best], "\n")
	got, want := "(end)", "(end)"
	if bestN < len(bl) {
		got = bl[bestN]
	}
	if bestN < len(sl) {
		want = sl[bestN]
	}
	return best + " line " + strconv.Itoa(bestN+1) + ": README has " + strconv.Quote(got) + ", the file " + strconv.Quote(want)
}

// A reader's fresh module with only a replace to the checkout builds the
// programs: they import the standard library, the library's own packages
// and modules the library requires, nothing of the examples module.
func TestQuickstartsImportOnlyWhatTheLibraryRequires(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var required []string
	for _, line := range strings.Split(string(mod), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if strings.Contains(line, "// indirect") {
			continue
		}
		if len(f) >= 2 && strings.Contains(f[0], ".") && strings.HasPrefix(f[1], "v") {
			required = append(required, f[0])
		}
	}
	for p := range files(t) {
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if ok := allowed(path, required); !ok {
				t.Errorf("%s imports %s, which a module with only the library would not have", p, path)
			}
		}
	}
}

func allowed(path string, required []string) bool {
	first, _, _ := strings.Cut(path, "/")
	if !strings.Contains(first, ".") {
		return true // the standard library
	}
	if path == "github.com/gracekit/gracekit/examples" || strings.HasPrefix(path, "github.com/gracekit/gracekit/examples/") {
		return false
	}
	if path == "github.com/gracekit/gracekit" || strings.HasPrefix(path, "github.com/gracekit/gracekit/") {
		return true
	}
	for _, m := range required {
		if path == m || strings.HasPrefix(path, m+"/") {
			return true
		}
	}
	return false
}
