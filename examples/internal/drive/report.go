package drive

import (
	"cmp"
	"slices"
	"time"
)

// ReasonCount is how many requests failed for one reason.
type ReasonCount struct {
	Reason string
	Count  int
}

// RankReasons lists reasons most frequent first, then by reason.
func RankReasons(reasons map[string]int) []ReasonCount {
	out := make([]ReasonCount, 0, len(reasons))
	for r, n := range reasons {
		out = append(out, ReasonCount{r, n})
	}
	slices.SortFunc(out, func(a, b ReasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Reason, b.Reason))
	})
	return out
}

// Rate is n per second of d; 0 when d is not positive.
func Rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
