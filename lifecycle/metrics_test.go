package lifecycle

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/kit/metrics"
)

// recHistogram records observations by label values, shared by its copies.
type recHistogram struct {
	m   map[string][]float64
	lvs []string
}

func (h recHistogram) With(lvs ...string) metrics.Histogram {
	return recHistogram{h.m, append(slices.Clone(h.lvs), lvs...)}
}

func (h recHistogram) Observe(v float64) {
	k := strings.Join(h.lvs, ",")
	h.m[k] = append(h.m[k], v)
}

func TestHistogramListenerObservesStepDurations(t *testing.T) {
	h := recHistogram{m: map[string][]float64{}}
	l := HistogramListener(h)
	l(Event{Step: "drain", Phase: PhaseStop, Duration: 1500 * time.Millisecond})
	l(Event{Step: "flush", Phase: PhaseStop, Skipped: true, Err: ErrSkipped})
	l(Event{Step: "listen", Phase: PhaseStop, Rollback: true, Err: errors.New("boom"), Duration: time.Millisecond})
	want := map[string][]float64{
		"step,drain,phase,stop,outcome,ok":         {1.5},
		"step,flush,phase,stop,outcome,skipped":    {0},
		"step,listen,phase,rollback,outcome,error": {0.001},
	}
	for k, v := range want {
		if !slices.Equal(h.m[k], v) {
			t.Errorf("%s: %v, want %v (all: %v)", k, h.m[k], v, h.m)
		}
	}
	HistogramListener(nil)(Event{Step: "x"}) // observes nothing, does not panic
}
