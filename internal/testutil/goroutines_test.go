package testutil

import (
	"sync"
	"testing"
)

func TestOwnGoroutinesCountsThisTestsAlone(t *testing.T) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	// Another test's goroutines, started outside the label.
	for range 3 {
		wg.Go(func() { <-stop })
	}
	OwnGoroutines(t, func(count func() int) {
		base := count() // this goroutine
		for range 4 {
			wg.Go(func() {
				// One more, started by a labeled goroutine.
				wg.Go(func() { <-stop })
				<-stop
			})
		}
		WaitFor(t, "eight labeled goroutines more", func() bool { return count() == base+8 })
	})
}
