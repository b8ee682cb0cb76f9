package sd

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func byPubThenID(a, b *entry) int {
	if c := strings.Compare(a.pub, b.pub); c != 0 {
		return c
	}
	return strings.Compare(a.inst.ID, b.inst.ID)
}

// sortByPub gives what a comparison sort by pub, then ID, gives: for pubs
// that share a long prefix or none, that are shorter than a key or equal in
// its 8 bytes, empty (a malformed node's), or the same on several IDs.
func TestSortByPubIsASortByPubThenID(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	shapes := []func() string{
		func() string { return fmt.Sprintf("10.1.%d.%d:8080", r.IntN(40), r.IntN(250)) },
		func() string {
			return fmt.Sprintf("http://10.%d.%d.%d:%d", r.IntN(3), r.IntN(3), r.IntN(300), 80+r.IntN(3))
		},
		func() string { return fmt.Sprintf("[fd00::%x]:%d", r.IntN(1<<16), 443) },
		func() string { return strings.Repeat("a", r.IntN(12)) + string(rune('a'+r.IntN(3))) },
		func() string { return "" },
		func() string { return "the-same-first-sixteen-bytes-" + fmt.Sprint(r.IntN(50)) },
		func() string {
			return fmt.Sprintf("https://10.%d.%d.%d:%d/", r.IntN(2), r.IntN(300), r.IntN(300), 8000+r.IntN(3))
		},
	}
	for trial := range 400 {
		var ents []*entry
		for i := range r.IntN(300) {
			shape := shapes[r.IntN(len(shapes))]
			if trial%3 == 0 {
				shape = shapes[trial%len(shapes)] // one shape: a long shared prefix
			}
			e := &entry{inst: Instance{ID: fmt.Sprintf("id-%03d", r.IntN(1000)+i*1000)}}
			e.setPub(shape())
			ents = append(ents, e)
		}
		if trial%5 == 0 && len(ents) > 1 {
			ents[1].setPub(ents[0].pub) // one pub on two instances
		}
		want := slices.Clone(ents)
		slices.SortStableFunc(want, byPubThenID)
		got := slices.Clone(ents)
		sortByPub(got)
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("trial %d: at %d %q (%s), want %q (%s)", trial, i, got[i].pub, got[i].inst.ID, want[i].pub, want[i].inst.ID)
			}
		}
	}
}

// orderedLocked is every stored entry once, sorted.
func TestOrderedLockedIsEveryEntrySorted(t *testing.T) {
	in := &Instancer{entries: map[string]*entry{}}
	for i := range 1000 {
		id := fmt.Sprintf("%04d", i)
		e := &entry{inst: Instance{ID: id}}
		e.setPub(fmt.Sprintf("10.0.%d.%d:80", i%7, i%251))
		in.entries[id] = e
	}
	got := in.orderedLocked()
	if len(got) != len(in.entries) {
		t.Fatalf("%d entries, want %d", len(got), len(in.entries))
	}
	seen := map[*entry]bool{}
	for i, e := range got {
		if seen[e] {
			t.Fatalf("%s twice", e.inst.ID)
		}
		seen[e] = true
		if i > 0 && byPubThenID(got[i-1], e) > 0 {
			t.Fatalf("at %d: %q after %q", i, e.pub, got[i-1].pub)
		}
	}
}
