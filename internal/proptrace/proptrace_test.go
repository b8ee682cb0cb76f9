package proptrace

import (
	"slices"
	"testing"
)

func TestMarkCallsTheHookUntilItIsCleared(t *testing.T) {
	var got []Stage
	SetHook(func(s Stage) { got = append(got, s) })
	Mark(Wire)
	Mark(Endpointer)
	SetHook(nil)
	Mark(Feed)
	if want := []Stage{Wire, Endpointer}; !slices.Equal(got, want) {
		t.Fatalf("hook saw %v, want %v", got, want)
	}
}

// Off, a mark costs the hot paths it sits on no allocation.
func TestMarkWithoutAHookAllocatesNothing(t *testing.T) {
	SetHook(nil)
	if n := testing.AllocsPerRun(1000, func() { Mark(Publish) }); n != 0 {
		t.Fatalf("Mark allocated %v times a call with no hook", n)
	}
}

func TestStageNames(t *testing.T) {
	for s := range Stages {
		if s.String() == "" || s.String() == "stage?" {
			t.Errorf("stage %d has no name", s)
		}
	}
	if got := Stages.String(); got != "stage?" {
		t.Errorf("Stages.String() = %q, want stage?", got)
	}
}
