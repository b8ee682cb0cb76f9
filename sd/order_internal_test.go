package sd

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// mergeRuns gives what one sort of all the runs' entries gives, for any
// number of runs of any length, duplicates included.
func TestMergeRunsIsASort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		var runs [][]named
		var all []named
		for range r.IntN(9) {
			var run []named
			for range r.IntN(40) {
				e := &entry{pub: fmt.Sprintf("10.0.%d.%d:80", r.IntN(4), r.IntN(30))}
				run = append(run, named{e.pub, e.pub, e})
			}
			slices.SortFunc(run, byPub)
			runs = append(runs, run)
			all = append(all, run...)
		}
		got := mergeRuns(runs)
		slices.SortStableFunc(all, byPub)
		if len(got) != len(all) {
			t.Fatalf("trial %d: merged %d of %d entries", trial, len(got), len(all))
		}
		for i := range got {
			if got[i].e.pub != all[i].e.pub {
				t.Fatalf("trial %d: at %d %q, want %q", trial, i, got[i].e.pub, all[i].e.pub)
			}
		}
	}
}

// The order a full re-read leaves is used only while it holds exactly the
// stored entries; otherwise the entries are sorted anew. Either way the
// result is every entry, sorted, once.
func TestOrderHintIsUsedOnlyWhenItIsTheStoredSet(t *testing.T) {
	mk := func(pub string) *entry { return &entry{pub: pub, ok: true} }
	a, b, c := mk("10.0.0.1:80"), mk("10.0.0.2:80"), mk("10.0.0.3:80")
	for _, tc := range []struct {
		name    string
		entries map[string]*entry
		hint    []named
		used    bool
	}{
		{"exact", map[string]*entry{"a": a, "b": b, "c": c}, []named{{"a", a.pub, a}, {"b", b.pub, b}, {"c", c.pub, c}}, true},
		{"an entry stored after it", map[string]*entry{"a": a, "b": b, "c": c}, []named{{"a", a.pub, a}, {"c", c.pub, c}}, false},
		{"an entry replaced after it", map[string]*entry{"a": a, "b": mk("10.0.0.9:80"), "c": c}, []named{{"a", a.pub, a}, {"b", b.pub, b}, {"c", c.pub, c}}, false},
		{"an entry forgotten after it", map[string]*entry{"a": a, "c": c}, []named{{"a", a.pub, a}, {"b", b.pub, b}, {"c", c.pub, c}}, false},
		// A listing that names a child twice, beside an unreadable child
		// kept from before: as long as the stored set, and each one stored.
		{"a child listed twice", map[string]*entry{"a": a, "c": c}, []named{{"a", a.pub, a}, {"a", a.pub, a}}, false},
		{"none", map[string]*entry{"c": c, "a": a, "b": b}, nil, false},
	} {
		in := &Instancer{entries: tc.entries}
		// A hint in the wrong order shows whether it was used.
		if tc.used {
			slices.Reverse(tc.hint)
		}
		got := in.orderedLocked(tc.hint)
		var pubs, want []string
		for _, e := range got {
			pubs = append(pubs, e.pub)
		}
		for _, e := range tc.entries {
			want = append(want, e.pub)
		}
		slices.Sort(want)
		if tc.used {
			slices.Reverse(want) // the hint's own order
		}
		if !slices.Equal(pubs, want) {
			t.Errorf("%s: %v, want %v (the hint used: %v)", tc.name, pubs, want, tc.used)
		}
	}
}
