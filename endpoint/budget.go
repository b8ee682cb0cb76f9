package endpoint

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Defaults of [NewRetryBudget], Finagle's.
const (
	// DefaultBudgetPercent is the share of recent requests that may be retried.
	DefaultBudgetPercent = 0.2
	// DefaultBudgetMinPerSecond is the floor of retries per second allowed
	// whatever the request rate.
	DefaultBudgetMinPerSecond = 10
	// DefaultBudgetTTL is the window over which requests are counted.
	DefaultBudgetTTL = 10 * time.Second
)

const (
	budgetSlots = 10
	// tokens are kept in thousandths so that percent deposits stay integral.
	tokenScale = 1000
)

// RetryBudget limits retries to a share of recent requests plus a small floor
// per second, in the manner of Finagle's RetryBudget, so that a failing fleet
// does not get a retry storm. Every request deposits percent of a token and
// every retry withdraws one; deposits expire after the TTL. The counts are
// kept in time slots with atomics and are approximate under heavy
// concurrency, like Finagle's. A budget may be shared by several retrying
// endpoints; it is safe for concurrent use.
type RetryBudget struct {
	deposit int64 // tokens in thousandths per request
	reserve int64 // minPerSecond × TTL in thousandths
	slot    int64 // nanoseconds per slot
	epoch   time.Time
	slots   [budgetSlots]budgetSlot
}

type budgetSlot struct {
	id      atomic.Int64 // slot number since epoch, +1 (0 = unused)
	balance atomic.Int64
	_       [48]byte // keep slots on separate cache lines
}

// NewRetryBudget returns a budget that allows retries of percent (0 to 1) of
// the requests of the last ttl (1s to 60s), plus minPerSecond (≥ 0) retries
// per second.
func NewRetryBudget(percent float64, minPerSecond int, ttl time.Duration) (*RetryBudget, error) {
	if !(percent >= 0 && percent <= 1) {
		return nil, fmt.Errorf("endpoint: budget percent %v out of range (0 to 1)", percent)
	}
	if minPerSecond < 0 {
		return nil, fmt.Errorf("endpoint: budget minimum %d retries per second is negative (minimum is 0)", minPerSecond)
	}
	if ttl < time.Second || ttl > time.Minute {
		return nil, fmt.Errorf("endpoint: budget ttl %v out of range (1s to 1m)", ttl)
	}
	return &RetryBudget{
		deposit: int64(percent * tokenScale),
		reserve: int64(minPerSecond) * int64(ttl/time.Second) * tokenScale,
		slot:    int64(ttl) / budgetSlots,
		epoch:   time.Now(),
	}, nil
}

func defaultBudget() *RetryBudget {
	b, _ := NewRetryBudget(DefaultBudgetPercent, DefaultBudgetMinPerSecond, DefaultBudgetTTL)
	return b
}

func (b *RetryBudget) current() *budgetSlot {
	id := int64(time.Since(b.epoch))/b.slot + 1
	s := &b.slots[id%budgetSlots]
	if old := s.id.Load(); old != id && old < id && s.id.CompareAndSwap(old, id) {
		s.balance.Store(0)
	}
	return s
}

// Deposit records a request.
func (b *RetryBudget) Deposit() {
	if b.deposit != 0 {
		b.current().balance.Add(b.deposit)
	}
}

// TryWithdraw takes one retry from the budget and reports whether there was
// one to take.
func (b *RetryBudget) TryWithdraw() bool {
	s := b.current()
	if b.Balance() < 1 {
		return false
	}
	s.balance.Add(-tokenScale)
	return true
}

// Balance returns the whole retries available now.
func (b *RetryBudget) Balance() int {
	id := int64(time.Since(b.epoch))/b.slot + 1
	sum := b.reserve
	for i := range b.slots {
		s := &b.slots[i]
		if sid := s.id.Load(); sid > id-budgetSlots && sid <= id {
			sum += s.balance.Load()
		}
	}
	return int(sum / tokenScale)
}
