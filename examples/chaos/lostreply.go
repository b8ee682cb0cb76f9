package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gracekit/gracekit/examples/internal/history"
	"github.com/gracekit/gracekit/sd"
)

// lostBound is the ctx bound of each call of a lostreply step: past the
// Registrar's reply limit (twice the session timeout) and one retry, so
// that the library, given the time, gets past a lost reply.
const lostBound = 3 * robustTimeout

// faultLostReply arms the bursts' proxy to lose the reply of one request
// of kind st.Reply, and runs a registration of a service of its own
// through it (register, OUT_OF_SERVICE, deregister), each call bounded
// by lostBound and recorded for the bounded validator. The service is
// new, so its parents are read and made: their requests lose replies
// too.
func (d *driver) faultLostReply(ctx context.Context, rs *robustState, st step, round int) error {
	px := rs.bursts.proxy
	op, ok := zkOps[st.Reply]
	if !ok {
		return fmt.Errorf("lostreply: unknown request kind %q", st.Reply)
	}
	rs.bursts.port++
	reg, err := sd.NewRegistrar(rs.bursts.c, sd.Instance{Name: fmt.Sprintf("%s-lost-r%d", burstService, round+1), ID: "lost-1",
		Address: "127.0.0.1", Port: rs.bursts.port}, sd.BasePath(rs.bursts.base))
	if err != nil {
		return err
	}
	what := st.String()
	px.LoseReply(op, 1, st.For)
	calls := []struct {
		op string
		f  func(context.Context) error
	}{
		{"register", reg.RegisterContext},
		{"set-status", func(ctx context.Context) error { return reg.SetStatus(ctx, sd.StatusOutOfService) }},
		{"deregister", reg.DeregisterContext},
	}
	var notes []string
	for _, c := range calls {
		if ctx.Err() != nil {
			break
		}
		call := d.boundedCall(ctx, px, c.op, reg.Path(), what, c.f)
		rs.mu.Lock()
		rs.calls = append(rs.calls, call)
		rs.mu.Unlock()
		took := "never returned"
		if !call.Returned.IsZero() {
			took = call.Returned.Sub(call.Sent).Round(time.Millisecond).String()
		}
		notes = append(notes, fmt.Sprintf("%s %s err=%q", c.op, took, call.Err))
	}
	var lost []string
	for _, l := range px.Disarm() {
		lost = append(lost, fmt.Sprintf("%s xid %d at %s", l.Op, l.Xid, l.At.Format("15:04:05.000")))
	}
	logf("round %d: %s: lost %v; %s", round+1, what, lost, strings.Join(notes, "; "))
	return ctx.Err()
}

// boundedCall runs f with a ctx of lostBound and notes when it returned.
// One still running past its bound and the skew is a hung call: the
// driver cuts px's connections, which fails the request it waits for,
// and waits for it once more (the call is its goroutine's, and ends
// with the bursts' client at the latest); Returned stays zero, since the
// call did not end by itself.
func (d *driver) boundedCall(ctx context.Context, px *zkProxy, op, path, what string, f func(context.Context) error) history.Call {
	cctx, cancel := context.WithTimeout(ctx, lostBound)
	defer cancel()
	call := history.Call{Op: op, Path: path, Sent: time.Now(), Bound: lostBound, What: what}
	done := make(chan error, 1)
	go func() { done <- f(cctx) }()
	hung := time.NewTimer(lostBound + 2*robustBounds.Skew)
	defer hung.Stop()
	select {
	case err := <-done:
		call.Returned = time.Now()
		if err != nil {
			call.Err = err.Error()
		}
		return call
	case <-hung.C:
	}
	logf("%s %s still running %v after it was sent with a bound of %v: cutting its connections", op, path,
		time.Since(call.Sent).Round(time.Millisecond), lostBound)
	px.Cut()
	px.Heal()
	select {
	case err := <-done:
		call.Err = fmt.Sprintf("returned only once the driver cut its connection, %v after it was sent: %v",
			time.Since(call.Sent).Round(time.Millisecond), err)
	case <-time.After(checkRecovered):
		call.Err = "still running after the driver cut its connection"
	}
	return call
}
