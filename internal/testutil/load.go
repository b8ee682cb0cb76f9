package testutil

import (
	"context"
	"sync"
	"time"
)

// Load runs workers goroutines that call call in a loop, each call bounded
// by 5 s, until Stop: the steady traffic a test stops a provider under.
// call returns the id of the instance that answered.
type Load struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	served   map[string]int
	answered int
	failed   int
	firstErr error
}

// StartLoad starts the workers; Stop ends them and waits.
func StartLoad(workers int, call func(ctx context.Context) (string, error)) *Load {
	l := &Load{stop: make(chan struct{}), served: map[string]int{}}
	for range workers {
		l.wg.Go(func() {
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				id, err := call(ctx)
				cancel()
				l.mu.Lock()
				if err != nil {
					l.failed++
					if l.firstErr == nil {
						l.firstErr = err
					}
				} else {
					l.answered++
					l.served[id]++
				}
				l.mu.Unlock()
			}
		})
	}
	return l
}

// Stop ends the workers and waits for them; it is idempotent.
func (l *Load) Stop() {
	l.mu.Lock()
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// Served returns how many calls id answered so far.
func (l *Load) Served(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.served[id]
}

// Answered and Failed count the calls so far; FirstErr is the first
// failure's error.
func (l *Load) Answered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.answered
}

// Failed counts the failed calls so far.
func (l *Load) Failed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

// FirstErr is the first failure's error, nil without one.
func (l *Load) FirstErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.firstErr
}
