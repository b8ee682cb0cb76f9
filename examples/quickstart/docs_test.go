package quickstart_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Issue 32: the step label values docs/METRICS.md lists are the names the
// stop and start steps carry (shutdown's Step* constants), no more, no less.
func TestMetricsPageNamesTheStepsTheCodeEmits(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../../shutdown/sequence.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var code []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "Step") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					code = append(code, v)
				}
			}
		}
	}
	if len(code) == 0 {
		t.Fatal("no Step* string constants in shutdown/sequence.go")
	}
	page, err := os.ReadFile("../../docs/METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(string(page), "\n") {
		if strings.HasPrefix(l, "| `gracekit_lifecycle_step_duration_seconds`") {
			row = l
		}
	}
	_, list, ok := strings.Cut(row, "`step` is one of ")
	if !ok {
		t.Fatalf("docs/METRICS.md's gracekit_lifecycle_step_duration_seconds row lists no step values: %q", row)
	}
	list, _, _ = strings.Cut(list, "(")
	var doc []string
	for _, m := range regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(list, -1) {
		doc = append(doc, m[1])
	}
	slices.Sort(code)
	slices.Sort(doc)
	if !slices.Equal(code, doc) {
		t.Errorf("docs/METRICS.md lists step values %v; the code's are %v", doc, code)
	}
}
