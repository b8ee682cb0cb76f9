package history

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Write leaves h and r in dir: history.json (everything recorded) and
// report.txt (what broke, when, which consumer).
func Write(dir string, h *History, r Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(h, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.txt"))
	if err != nil {
		return err
	}
	WriteReport(f, h, r)
	return f.Close()
}

// Read loads a history that Write left.
func Read(path string) (*History, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h History
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &h, nil
}

// WriteReport prints r's violations in time order, then the counts.
func WriteReport(w io.Writer, h *History, r Report) {
	fmt.Fprintf(w, "seed %d: %d checks, %d unverified (truth gaps), %d violations\n", h.Seed, r.Checks, r.Unverified, len(r.Violations))
	if h.Schedule != "" {
		fmt.Fprintf(w, "schedule: %s\n", h.Schedule)
	}
	fmt.Fprintf(w, "truth: %d changes, %d gaps; %d publishes; %d heals; %d requests, %d failed, %d duplicated\n",
		len(h.Truth), len(h.Gaps), len(h.Publishes), len(h.Heals), r.Requests, r.Failed, r.Duplicated)
	if len(r.ByCheck) > 0 {
		fmt.Fprintf(w, "checks by validator: %s\n", byCheck(r.ByCheck))
	}
	vs := slices.Clone(r.Violations)
	slices.SortStableFunc(vs, func(a, b Violation) int { return a.At.Compare(b.At) })
	for _, v := range vs {
		who := v.Consumer
		if v.Service != "" {
			who += " " + v.Service
		}
		fmt.Fprintf(w, "%s %s [%s] %s\n", ts(v.At), v.Check, who, v.What)
	}
	for _, hl := range h.Heals {
		fmt.Fprintf(w, "heal %s: %s\n", ts(hl.At), hl.What)
	}
}

// byCheck lists each validator's count, by name.
func byCheck(m map[string]int) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// ByCheckString is r.ByCheck on one line.
func (r Report) ByCheckString() string { return byCheck(r.ByCheck) }
