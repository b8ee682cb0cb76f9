package sd

import (
	kitsd "github.com/go-kit/kit/sd"
)

type subscriber struct {
	cancel chan struct{} // closed by Deregister
	sent   uint64        // version last delivered
	busy   chan struct{} // non-nil while a send to it is under way; closed after
}

// Register implements sd.Instancer: once the first load is done, ch
// receives the current set before Register returns (as go-kit's own
// Instancers do), then the complete set on every change. Later sends
// happen on the Instancer's dispatcher goroutine, never under a lock, and
// always carry the newest set.
func (in *Instancer) Register(ch chan<- kitsd.Event) {
	s := &subscriber{cancel: make(chan struct{})}
	in.mu.Lock()
	var ev kitsd.Event
	first := in.firstDone
	if first {
		ev = kitsd.Event{Instances: in.pub, Err: in.pubErr}
		s.sent, s.busy = in.version, make(chan struct{})
	}
	in.subs[ch] = s
	in.mu.Unlock()
	if first {
		in.send(ch, s, ev, s.sent)
	}
	in.signal()
}

// send delivers ev to s unless it is deregistered or the Instancer stops,
// then marks the send done. s.busy must have been set under in.mu.
func (in *Instancer) send(ch chan<- kitsd.Event, s *subscriber, ev kitsd.Event, version uint64) {
	delivered := false
	select {
	case <-s.cancel: // deregistered before the send began: ch may be closed
	default:
		select {
		case ch <- ev:
			delivered = true
		case <-s.cancel:
		case <-in.ctx.Done():
		}
	}
	in.mu.Lock()
	if delivered && version > s.sent {
		s.sent = version
	}
	close(s.busy)
	s.busy = nil
	in.mu.Unlock()
}

// Deregister implements sd.Instancer. Once it returns nothing more is sent
// on ch, so the caller may close it. It waits only for a send to ch itself.
func (in *Instancer) Deregister(ch chan<- kitsd.Event) {
	in.mu.Lock()
	s, ok := in.subs[ch]
	var busy chan struct{}
	if ok {
		delete(in.subs, ch)
		close(s.cancel)
		busy = s.busy
	}
	in.mu.Unlock()
	if busy != nil {
		<-busy
	}
}

func (in *Instancer) bump() {
	in.version++
	in.publishes.Add(1)
	in.signal()
}

func (in *Instancer) signal() {
	select {
	case in.notify <- struct{}{}:
	default:
	}
}

// dispatch sends the latest set to every subscriber that has not seen it.
// It sends without holding in.mu, so a slow subscriber delays only the
// others' events, never discovery itself, and it always sends the newest set.
func (in *Instancer) dispatch() {
	defer in.wg.Done()
	for {
		select {
		case <-in.ctx.Done():
			return
		case <-in.notify:
		}
		for {
			in.mu.Lock()
			if !in.firstDone {
				in.mu.Unlock()
				break
			}
			var ch chan<- kitsd.Event
			var s *subscriber
			for c, sub := range in.subs {
				if sub.sent < in.version && sub.busy == nil {
					ch, s = c, sub
					break
				}
			}
			if s == nil {
				in.mu.Unlock()
				break
			}
			version := in.version
			ev := kitsd.Event{Instances: in.pub, Err: in.pubErr}
			s.busy = make(chan struct{})
			in.mu.Unlock()
			in.send(ch, s, ev, version)
			if in.ctx.Err() != nil {
				return
			}
		}
	}
}
