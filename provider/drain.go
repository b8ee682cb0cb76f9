package provider

import (
	"context"
	"sync"
	"time"

	"github.com/gracekit/gracekit/sd"
)

// Who took an instance out of rotation, in HealthTransition.By.
const (
	ByHealth   = sd.OutByHealth       // the instance's HealthCheck (sd.MetadataOutBy in its node)
	ByOperator = sd.DrainedByOperator // gracekit drain (see sd.Drain)
)

// drainFlushBound bounds the gateway flush of an operator's drain.
const drainFlushBound = 10 * time.Second

// verdict is what holds the instance out of rotation, the health check's
// or an operator's, and the transitions so far. Readiness is ready only
// while neither does.
type verdict struct {
	mu          sync.Mutex
	sick        bool   // the health check's last verdict
	drainedBy   string // applied by the drain loop
	seen        string // the Registrar's last word, which the loop applies
	transitions []HealthTransition
	poke        chan struct{}
}

// addLocked records a transition as it is decided, v.mu held, and
// returns its index for done.
func (v *verdict) addLocked(t HealthTransition) int {
	v.transitions = append(v.transitions, t)
	return len(v.transitions) - 1
}

// done completes transition i once it was carried out: err is everything
// that failed, the check's own error included.
func (v *verdict) done(i int, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.transitions[i].Err = err
	v.transitions[i].Done = time.Now()
}

// setSick records the health check's verdict, applies the whole verdict
// to the readiness and records the transition, all at once; it returns
// the transition's index.
func (p *Provider) setSick(sick bool, cause error) int {
	v := &p.verdict
	v.mu.Lock()
	defer v.mu.Unlock()
	v.sick = sick
	p.applyReadinessLocked()
	return v.addLocked(HealthTransition{At: time.Now(), Healthy: !sick, By: ByHealth, Err: cause})
}

// applyReadinessLocked sets the readiness from the whole verdict; v.mu is
// held. Computed under the lock and applied after it, a health check that
// recovered as a drain landed could apply its stale "ready" last and leave
// a drained instance ready. The readiness's followers (gRPC health, the
// go-kit twin) are called from here, so they must not call the Provider.
// The stop needs no verdict: Readiness never leaves stopping.
func (p *Provider) applyReadinessLocked() {
	v := &p.verdict
	p.ready.SetDrained(v.drainedBy != "")
	p.ready.SetHealthy(!v.sick && v.drainedBy == "")
}

// onRegistrarEvent runs on the Registrar's goroutine: it only notes the
// marker and wakes the drain loop.
func (p *Provider) onRegistrarEvent(ev sd.RegistrarEvent) {
	if ev.Kind != sd.EventDrained && ev.Kind != sd.EventUndrained {
		return
	}
	v := &p.verdict
	v.mu.Lock()
	v.seen = ev.DrainedBy
	v.mu.Unlock()
	select {
	case v.poke <- struct{}{}:
	default:
	}
}

// drainLoop carries an operator's drain out as a failed health check is:
// readiness, and a flush of every gateway (the Registrar writes the
// status itself); an undrain brings readiness back unless the health
// check holds the instance out.
type drainLoop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (p *Provider) startDrain() {
	ctx, cancel := context.WithCancel(context.Background())
	d := &drainLoop{cancel: cancel, done: make(chan struct{})}
	p.mu.Lock()
	p.drain = d
	p.mu.Unlock()
	go func() {
		defer close(d.done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.verdict.poke:
			}
			p.applyDrain(ctx)
		}
	}()
}

// stopDrain stops the drain loop and waits for it: a flush under way ends
// with the loop's ctx.
func (p *Provider) stopDrain() {
	p.mu.Lock()
	d := p.drain
	p.mu.Unlock()
	if d != nil {
		d.cancel()
		<-d.done
	}
}

func (p *Provider) applyDrain(ctx context.Context) {
	v := &p.verdict
	v.mu.Lock()
	by, was := v.seen, v.drainedBy
	v.drainedBy = by
	sick := v.sick
	i := -1
	if by != was {
		p.applyReadinessLocked()
		now := time.Now()
		switch {
		case by != "":
			i = v.addLocked(HealthTransition{At: now, Healthy: false, By: by})
		case !sick: // the Registrar writes the status: nothing to carry out
			v.addLocked(HealthTransition{At: now, Healthy: true, By: ByOperator, Done: now})
		}
	}
	v.mu.Unlock()
	if by == was {
		return
	}
	if by == "" {
		p.log.Info("drain: undrained by the operator", "health_check_failing", sick)
		return
	}
	var err error
	if p.notify != nil {
		fctx, cancel := context.WithTimeout(ctx, drainFlushBound)
		_, err = p.notify.Flush(fctx)
		cancel()
	}
	if err != nil {
		p.log.Warn("drain: out of rotation by the operator; a gateway flush failed", "by", by, "err", err)
	} else {
		p.log.Info("drain: out of rotation by the operator", "by", by)
	}
	v.done(i, err)
}
