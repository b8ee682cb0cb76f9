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
	code := stepNames(t)
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

// Issue 39, item 6: one vocabulary for the stop. docs/STOP.md's step
// table names the steps the log lines name (shutdown's Step* constants,
// the step= of every "lifecycle step" line and of the "stop done" line),
// no more, no less, and its picture of the stop shows them in the
// table's order (the stop's), ready-check aside (it has no stop).
func TestStopPageNamesTheStepsTheLogLinesName(t *testing.T) {
	code := stepNames(t)
	page, err := os.ReadFile("../../docs/STOP.md")
	if err != nil {
		t.Fatal(err)
	}
	var table, picture []string
	row := regexp.MustCompile("^\\| `([a-z-]+)`")
	for _, l := range strings.Split(string(page), "\n") {
		if m := row.FindStringSubmatch(l); m != nil {
			table = append(table, m[1])
		}
		if rest, ok := strings.CutPrefix(l, "SIGTERM ─► "); ok {
			picture = strings.Split(rest, " ─► ")
		}
	}
	sorted := slices.Sorted(slices.Values(table))
	slices.Sort(code)
	if !slices.Equal(sorted, code) {
		t.Errorf("docs/STOP.md's step table names %v; the code's steps are %v", table, code)
	}
	want := slices.DeleteFunc(slices.Clone(table), func(s string) bool { return s == "ready-check" })
	if !slices.Equal(picture, want) {
		t.Errorf("docs/STOP.md's picture shows %v, want the table's stop steps in its order %v", picture, want)
	}
}

// stepNames returns the values of shutdown's Step* string constants.
func stepNames(t *testing.T) []string {
	t.Helper()
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
	return code
}
