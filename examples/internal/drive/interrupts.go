package drive

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// OnInterrupt relays SIGINT and SIGTERM: the first calls first, with the
// signal, the second calls second (which is expected to exit at once).
// The returned stop ends the relay, waits for a first or second call in
// progress to return, and restores the default action; call it once.
func OnInterrupt(first func(os.Signal), second func()) (stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case sig := <-sigs:
			first(sig)
		case <-quit:
			return
		}
		select {
		case <-sigs:
			second()
		case <-quit:
		}
	}()
	return func() {
		close(quit)
		wg.Wait()
		signal.Stop(sigs)
	}
}
