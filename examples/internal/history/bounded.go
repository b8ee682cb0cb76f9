package history

import (
	"fmt"
	"time"
)

// CheckBounded is the name of Bounded's violations.
const CheckBounded = "bounded"

// Call is one library call the driver made with a bound (its ctx's
// timeout), such as a registration while the proxy lost a reply.
type Call struct {
	Op    string        `json:"op"` // register, set-status, deregister
	Path  string        `json:"path"`
	Sent  time.Time     `json:"sent"`
	Bound time.Duration `json:"bound"`
	// Returned is when it returned; zero when it had not by the end of
	// the run (the driver stopped waiting).
	Returned time.Time `json:"returned,omitzero"`
	Err      string    `json:"err,omitempty"`
	What     string    `json:"what,omitempty"` // the fault it ran under
}

// Bounded checks that every Call returned within its bound and b.Skew:
// a call given a ctx ends with it, whatever ZooKeeper did with its
// requests (a lost reply, a silent connection). Whether it succeeded is
// not its concern.
func Bounded(h *History, b Bounds) Report {
	var r Report
	for _, c := range h.Calls {
		r.Checks++
		limit := c.Bound + b.Skew
		switch {
		case c.Returned.IsZero():
			r.Violations = append(r.Violations, Violation{Check: CheckBounded, At: c.Sent.Add(limit),
				What: fmt.Sprintf("%s %s sent at %s with a bound of %v had not returned when the driver stopped waiting (%s)",
					c.Op, c.Path, ts(c.Sent), c.Bound, c.What)})
		case c.Returned.Sub(c.Sent) > limit:
			r.Violations = append(r.Violations, Violation{Check: CheckBounded, At: c.Returned,
				What: fmt.Sprintf("%s %s sent at %s with a bound of %v returned %v later (%s; err %q)",
					c.Op, c.Path, ts(c.Sent), c.Bound, c.Returned.Sub(c.Sent).Round(time.Millisecond), c.What, c.Err)})
		}
	}
	return r
}
