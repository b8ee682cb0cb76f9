// Package weighted holds the pick tables that endpoint's balancers and
// grpcresolver's picker share: weights scaled to 16 bits once per change,
// then picked from without allocating, in turn (grpc-go's static stride
// scheduler, gRFC A58) or at random (a binary search of prefix sums).
package weighted

import (
	"math"
	"sync/atomic"
)

// maxWeight is the largest scaled weight, as grpc-go's scheduler has it.
const maxWeight = math.MaxUint16

// Table is an immutable set of scaled weights. The nil *Table means every
// weight is equal: callers take their unweighted fast path.
type Table struct {
	w   []uint16 // scaled: the largest is maxWeight, none is below 1
	cum []uint64 // cum[i] is w[0] + ... + w[i]
}

// New scales ws (one per instance, in the callers' order) into a Table, or
// returns nil when fewer than two are given or they all scale to the same
// weight. A weight that is not a positive number counts as the smallest.
func New(ws []float64) *Table {
	if len(ws) < 2 {
		return nil
	}
	top := 0.0
	for _, w := range ws {
		if w > top && !math.IsInf(w, 1) {
			top = w
		}
	}
	if top <= 0 {
		return nil
	}
	t := &Table{w: make([]uint16, len(ws)), cum: make([]uint64, len(ws))}
	equal := true
	var sum uint64
	for i, w := range ws {
		s := uint16(1)
		switch {
		case math.IsInf(w, 1):
			s = maxWeight
		case w > 0:
			s = uint16(max(1, math.Round(w/top*maxWeight)))
		}
		t.w[i] = s
		if s != t.w[0] {
			equal = false
		}
		sum += uint64(s)
		t.cum[i] = sum
	}
	if equal {
		return nil
	}
	return t
}

// Len is the number of weights.
func (t *Table) Len() int { return len(t.w) }

// Weight is the scaled weight of i, between 1 and 65535.
func (t *Table) Weight(i int) uint16 { return t.w[i] }

// Next returns the next index in stride order, taking sequence numbers
// from seq (which callers may share across tables: a new table carries
// on). Over 65535·n consecutive sequence numbers each index i is returned
// about Weight(i) times, spread evenly. It never allocates and loops at
// most about n times per pick, since the heaviest index is never skipped.
func (t *Table) Next(seq *atomic.Uint64) int {
	const offset = maxWeight / 2
	n := uint64(len(t.w))
	for {
		idx := seq.Add(1) - 1
		i := idx % n
		gen := idx / n
		w := uint64(t.w[i])
		// i is picked w times per maxWeight generations; the offset by i
		// keeps neighbours with equal weights from skipping together.
		if (w*gen+i*offset)%maxWeight >= maxWeight-w {
			return int(i)
		}
	}
}

// Total is the sum of the scaled weights: Pick takes r below it.
func (t *Table) Total() uint64 { return t.cum[len(t.cum)-1] }

// Pick returns the index whose share of [0, Total) holds r: a uniformly
// drawn r picks each index in proportion to its weight.
func (t *Table) Pick(r uint64) int {
	lo, hi := 0, len(t.cum)-1
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.cum[m] > r {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// PickOther is Pick over every index but not: r must be below
// Total() - Weight(not). It draws a second, different instance.
func (t *Table) PickOther(r uint64, not int) int {
	before := t.cum[not] - uint64(t.w[not])
	if r >= before {
		r += uint64(t.w[not])
	}
	return t.Pick(r)
}
