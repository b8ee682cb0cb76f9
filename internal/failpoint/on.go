//go:build gracekit_failpoints

package failpoint

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Enabled tells whether the build has the gracekit_failpoints tag.
const Enabled = true

// action is an armed point's behaviour.
type action struct {
	percent int // 1 to 100
	left    int // times left; -1: no limit
	sleep   time.Duration
}

var (
	mu    sync.Mutex
	armed = map[string]*action{}
	hits  = map[string]int{}
)

func init() {
	if v := os.Getenv(EnvVar); v != "" {
		if err := EnableAll(v); err != nil {
			// A chaos run that asked for faults must not run without them.
			panic(err)
		}
	}
}

// Inject runs the point's action when it is armed.
func Inject(name string) {
	mu.Lock()
	a := armed[name]
	if a == nil || a.left == 0 || (a.percent < 100 && rand.IntN(100) >= a.percent) {
		mu.Unlock()
		return
	}
	if a.left > 0 {
		a.left--
	}
	hits[name]++
	d := a.sleep
	mu.Unlock()
	time.Sleep(d)
}

// Enable arms point name with spec ([P%][N*]sleep(D)).
func Enable(name, spec string) error {
	if !slices.Contains(Names, name) {
		return fmt.Errorf("failpoint: unknown point %q (want one of %s)", name, strings.Join(Names, ", "))
	}
	a, err := parse(spec)
	if err != nil {
		return fmt.Errorf("failpoint: %s: %w", name, err)
	}
	mu.Lock()
	armed[name] = a
	mu.Unlock()
	return nil
}

// EnableAll arms every name=spec of a ';'-separated list.
func EnableAll(list string) error {
	for item := range strings.SplitSeq(list, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, spec, ok := strings.Cut(item, "=")
		if !ok {
			return fmt.Errorf("failpoint: %q is not name=spec", item)
		}
		if err := Enable(strings.TrimSpace(name), strings.TrimSpace(spec)); err != nil {
			return err
		}
	}
	return nil
}

// Disable disarms point name.
func Disable(name string) {
	mu.Lock()
	delete(armed, name)
	mu.Unlock()
}

// Hits is how many times point name ran its action.
func Hits(name string) int {
	mu.Lock()
	defer mu.Unlock()
	return hits[name]
}

func parse(spec string) (*action, error) {
	a := &action{percent: 100, left: -1}
	s := spec
	if p, rest, ok := strings.Cut(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 100 {
			return nil, fmt.Errorf("invalid probability %q in %q (1 to 100)", p, spec)
		}
		a.percent, s = n, rest
	}
	if c, rest, ok := strings.Cut(s, "*"); ok {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("invalid count %q in %q (1 or more)", c, spec)
		}
		a.left, s = n, rest
	}
	arg, ok := strings.CutPrefix(s, "sleep(")
	if !ok || !strings.HasSuffix(arg, ")") {
		return nil, fmt.Errorf("invalid action %q in %q (want sleep(D), e.g. sleep(200ms))", s, spec)
	}
	d, err := time.ParseDuration(strings.TrimSuffix(arg, ")"))
	if err != nil || d <= 0 || d > time.Minute {
		return nil, fmt.Errorf("invalid sleep %q in %q (a duration up to 1m)", arg, spec)
	}
	a.sleep = d
	return a, nil
}
