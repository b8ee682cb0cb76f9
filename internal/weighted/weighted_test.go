package weighted

import (
	"math"
	"sync/atomic"
	"testing"
)

func TestNewIsNilForEqualOrTooFewWeights(t *testing.T) {
	tests := []struct {
		name string
		give []float64
	}{
		{"no weights", nil},
		{"one weight", []float64{3}},
		{"equal weights", []float64{2, 2, 2}},
		{"no positive weight", []float64{0, -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name+" give no table", func(t *testing.T) {
			if got := New(tt.give); got != nil {
				t.Fatalf("New(%v) = a table of %d", tt.give, got.Len())
			}
		})
	}
}

func TestNextFollowsTheWeights(t *testing.T) {
	tb := New([]float64{1, 2, 0.5, 0, math.NaN()})
	if tb == nil {
		t.Fatal("no table")
	}
	if tb.Weight(3) != 1 || tb.Weight(4) != 1 {
		t.Fatalf("non-positive weights scale to %d and %d, want the smallest, 1", tb.Weight(3), tb.Weight(4))
	}
	var seq atomic.Uint64
	got := make([]int, tb.Len())
	const n = 35000
	for range n {
		got[tb.Next(&seq)]++
	}
	// 1 : 2 : 0.5 of 3.5: 10,000, 20,000, 5,000; the last two almost never.
	for i, want := range []int{10000, 20000, 5000} {
		if d := got[i] - want; d > 100 || d < -100 {
			t.Fatalf("picks %v, want about 10000, 20000, 5000, 0, 0", got)
		}
	}
}

func TestPickAndPickOtherCoverTheirShares(t *testing.T) {
	tb := New([]float64{1, 3})
	total := tb.Total()
	counts := make([]uint64, 2)
	for r := uint64(0); r < total; r++ {
		counts[tb.Pick(r)]++
	}
	if counts[0] != uint64(tb.Weight(0)) || counts[1] != uint64(tb.Weight(1)) {
		t.Fatalf("Pick over [0, Total) gave %v, want the weights %d, %d", counts, tb.Weight(0), tb.Weight(1))
	}
	for r := uint64(0); r < total-uint64(tb.Weight(1)); r++ {
		if got := tb.PickOther(r, 1); got != 0 {
			t.Fatalf("PickOther(%d, 1) = %d", r, got)
		}
	}
	for r := uint64(0); r < total-uint64(tb.Weight(0)); r++ {
		if got := tb.PickOther(r, 0); got != 1 {
			t.Fatalf("PickOther(%d, 0) = %d", r, got)
		}
	}
}
