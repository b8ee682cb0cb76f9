package sd

import (
	"math/bits"
	"slices"
	"strings"
)

// A published set is sorted by what it publishes (then by instance ID), so
// that an unchanged set compares equal and go-kit's endpoint cache, which
// sorts what it gets, finds it in order.
//
// A comparison sort of 10,000 entries by their pub strings took 2.1 to 2.6
// ms, most of it following each entry to its string's bytes at every
// comparison; sorting each multiRead batch as it came in and merging the
// runs took 4.6 to 5.9 ms, and competed with the server for the cores
// while it still sent the batches. Instead each entry keeps its pub's
// first 16 bytes as two numbers, taken when it is decoded (its bytes are
// in the cache then), and sortByPub sorts the numbers, a byte at a time,
// skipping the bytes every key shares (the "10.1." of a subnet, the
// "http://" of URIs); only entries whose first 16 bytes agree are
// compared as strings.

// pubKey is a pub's first 16 bytes, big-endian, zero-padded. When two keys
// differ, they order their pubs as strings.Compare does.
type pubKey [2]uint64

func keyOf(pub string) pubKey {
	var k pubKey
	for i := range min(len(pub), 16) {
		k[i/8] |= uint64(pub[i]) << (56 - 8*(i%8))
	}
	return k
}

// keyed is 8 bytes of an entry's key, from the first byte that is not
// the same in every key, with the entry's place in the slice being sorted:
// an index, not the *entry, so that the passes move no pointers (and run
// no write barriers), in 16 bytes.
type keyed struct {
	key uint64
	i   int32
}

// sortByPub sorts ents by pub, then by instance ID.
func sortByPub(ents []*entry) {
	if len(ents) < 2 {
		return
	}
	// The bytes every key shares order nothing: the window starts after.
	var or, and pubKey = pubKey{}, pubKey{^uint64(0), ^uint64(0)}
	for _, e := range ents {
		or[0], or[1] = or[0]|e.key[0], or[1]|e.key[1]
		and[0], and[1] = and[0]&e.key[0], and[1]&e.key[1]
	}
	skip := bits.LeadingZeros64(or[0]^and[0]) / 8 // 8 when the first word is shared
	if skip == 8 {
		skip += bits.LeadingZeros64(or[1]^and[1]) / 8
	}
	ks := make([]keyed, len(ents))
	for i, e := range ents {
		ks[i] = keyed{window(e.key, skip), int32(i)}
	}
	radixSort(ks, make([]keyed, len(ks)))
	src := slices.Clone(ents)
	for lo := 0; lo < len(ks); {
		hi := lo + 1
		for hi < len(ks) && ks[hi].key == ks[lo].key {
			hi++
		}
		if hi-lo > 1 { // the same window: the whole pubs decide
			slices.SortFunc(ks[lo:hi], func(a, b keyed) int {
				ea, eb := src[a.i], src[b.i]
				if c := strings.Compare(ea.pub, eb.pub); c != 0 {
					return c
				}
				return strings.Compare(ea.inst.ID, eb.inst.ID)
			})
		}
		lo = hi
	}
	for i, k := range ks {
		ents[i] = src[k.i]
	}
}

// window is the 8 bytes of k from byte skip (0 to 16), zero-padded.
func window(k pubKey, skip int) uint64 {
	switch {
	case skip == 0:
		return k[0]
	case skip < 8:
		return k[0]<<(8*skip) | k[1]>>(64-8*skip)
	case skip < 16:
		return k[1] << (8 * (skip - 8))
	}
	return 0
}

// radixSort sorts ks by key, least significant byte first, using tmp (as
// long as ks) for room. Each pass is stable, so the order the passes
// before it left holds within each bucket. A byte the same in every key
// costs no pass.
func radixSort(ks, tmp []keyed) {
	orig := ks
	var or, and uint64 = 0, ^uint64(0)
	for _, k := range ks {
		or |= k.key
		and &= k.key
	}
	varying := or ^ and
	for shift := uint(0); shift < 64; shift += 8 {
		if (varying>>shift)&0xff == 0 {
			continue
		}
		var count [256]int
		for _, k := range ks {
			count[(k.key>>shift)&0xff]++
		}
		sum := 0
		for b, c := range count {
			count[b] = sum
			sum += c
		}
		for _, k := range ks {
			b := (k.key >> shift) & 0xff
			tmp[count[b]] = k
			count[b]++
		}
		ks, tmp = tmp, ks
	}
	if &ks[0] != &orig[0] {
		copy(orig, ks)
	}
}

// orderedLocked is every stored entry, sorted by pub. in.mu must be held.
func (in *Instancer) orderedLocked() []*entry {
	ents := make([]*entry, 0, len(in.entries))
	for _, e := range in.entries {
		ents = append(ents, e)
	}
	sortByPub(ents)
	return ents
}
