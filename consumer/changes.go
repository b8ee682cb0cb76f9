package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	kitsd "github.com/go-kit/kit/sd"
)

// ChangeLogInterval is the least time between two "instances changed"
// lines of one service: the changes within it are folded into the next
// line, which counts them.
const ChangeLogInterval = time.Second

// maxNamed is how many added or removed instances a line names; it
// counts the others.
const maxNamed = 10

// changeLog logs, at info, a service's instance set each time it changes:
// one line with the count and the instances added and removed since the
// line before (the first line: since nothing). Lines are at least an
// interval apart: the changes within one are folded into the next line,
// which counts them (changes, when more than one). It follows the Instancer as a subscriber of its
// own, on a goroutine that stop ends and waits for.
type changeLog struct {
	in       kitsd.Instancer
	log      *slog.Logger
	interval time.Duration
	ch       chan kitsd.Event
	quit     chan struct{}
	done     chan struct{}
}

// startChangeLog subscribes to in and logs its changes to log until stop.
func startChangeLog(in kitsd.Instancer, log *slog.Logger, interval time.Duration) *changeLog {
	w := &changeLog{in: in, log: log, interval: interval, ch: make(chan kitsd.Event), quit: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	in.Register(w.ch) // sd.Instancer sends the current set, which run receives, before it returns
	return w
}

// stop ends the subscription and the goroutine, and waits for it. It is
// not to be called twice.
func (w *changeLog) stop() {
	w.in.Deregister(w.ch)
	close(w.quit)
	<-w.done
}

func (w *changeLog) run() {
	defer close(w.done)
	var (
		logged, cur []string // the set of the last line, and the newest
		seen        bool     // a set was received
		changes     int      // sets received since the last line
		last        time.Time
		timer       *time.Timer
		due         <-chan time.Time
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case ev := <-w.ch:
			set := slices.Clone(ev.Instances)
			slices.Sort(set)
			set = slices.Compact(set)
			if seen && slices.Equal(set, cur) {
				continue // the same set with another error: the Instancer logs those
			}
			cur, seen = set, true
			changes++
			if wait := time.Until(last.Add(w.interval)); wait > 0 {
				if timer == nil {
					timer = time.NewTimer(wait)
					due = timer.C
				}
				continue
			}
		case <-due:
			timer, due = nil, nil
		case <-w.quit:
			return
		}
		added, removed := diff(logged, cur)
		attrs := []slog.Attr{slog.Int("count", len(cur)), slog.String("added", names(added)), slog.String("removed", names(removed))}
		if changes > 1 {
			attrs = append(attrs, slog.Int("changes", changes)) // folded into this line
		}
		w.log.LogAttrs(context.Background(), slog.LevelInfo, "instances changed", attrs...)
		logged, changes, last = cur, 0, time.Now()
	}
}

// diff returns what is in b and not in a, and what is in a and not in b;
// both are sorted.
func diff(a, b []string) (added, removed []string) {
	for _, s := range b {
		if _, ok := slices.BinarySearch(a, s); !ok {
			added = append(added, s)
		}
	}
	for _, s := range a {
		if _, ok := slices.BinarySearch(b, s); !ok {
			removed = append(removed, s)
		}
	}
	return added, removed
}

// names lists up to maxNamed instances, comma-separated, and counts the
// rest.
func names(ss []string) string {
	if len(ss) <= maxNamed {
		return strings.Join(ss, ",")
	}
	return fmt.Sprintf("%s (+%d more)", strings.Join(ss[:maxNamed], ","), len(ss)-maxNamed)
}
