package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The fixture's functions, each a case: a watcher made in the default
// mode directly, through a helper, in a closure, through a function passed
// as a value, and one of two; pinned ones by a variable, inline, through a
// helper's forwarded options; none at all; and names go test does not run.
func TestTheDefaultModeWatchersOfTheFixture(t *testing.T) {
	got, err := defaultModeWatchers("testdata/pkg")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Example", "TestCatalogDefault", "TestDefault", "TestDefaultThroughAHelper", "TestInAClosure", "TestMixed", "TestThroughAValue"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// On sd's tests: the pattern names tests that watch in the default mode,
// not those that pin the mode, each alone.
func TestSdsPattern(t *testing.T) {
	got, err := defaultModeWatchers("../../../sd")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 20 {
		t.Fatalf("%d of sd's tests watch in the default mode, want the many that do: %v", len(got), got)
	}
	for _, pinned := range []string{"TestARestoredEnsembleTakesTheProviderAndItsConsumersBack", "TestACatalogNeverListsAgainAServiceDeletedBeforeAStaleReRead"} {
		if slices.Contains(got, pinned) {
			t.Errorf("%s pins its watch mode but is listed", pinned)
		}
	}
	re, err := regexp.Compile("^(" + strings.Join(got, "|") + ")$")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range got {
		if !re.MatchString(name) || re.MatchString(name+"x") {
			t.Errorf("the pattern does not match %s alone", name)
		}
	}
}
