package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// supervisor owns every child process of the driver. Each child runs in its
// own process group with Pdeathsig, so that a driver that dies for any
// reason takes its children with it; KillAll ends them on every exit path.
type supervisor struct {
	mu     sync.Mutex
	procs  map[*proc]struct{}
	closed bool
}

func newSupervisor() *supervisor { return &supervisor{procs: map[*proc]struct{}{}} }

// proc is one child: a provider or a gateway.
type proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd

	done     chan struct{} // closed once the process has been reaped
	exitedAt time.Time     // set before done is closed
	waitErr  error         // set before done is closed
}

var errClosed = errors.New("chaos: shutting down")

// start runs bin with env; its stdout and stderr are appended to logPath.
func (s *supervisor) start(name, bin string, args, env []string, logPath string) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	s.procs[p] = struct{}{}
	go func() {
		err := cmd.Wait()
		p.exitedAt, p.waitErr = time.Now(), err
		logf.Close()
		s.mu.Lock()
		delete(s.procs, p)
		s.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// signal sends sig to the process's group.
func (p *proc) signal(sig syscall.Signal) { _ = syscall.Kill(-p.cmd.Process.Pid, sig) }

// exited tells whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig, waits up to limit for the process to end, then kills its
// group. It reports whether it had to kill.
func (p *proc) stop(sig syscall.Signal, limit time.Duration) (killed bool) {
	p.signal(sig)
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-p.done:
		return false
	case <-t.C:
	}
	p.signal(syscall.SIGKILL)
	<-p.done
	return true
}

// exitString says how the process ended: "0", "1", "signal: killed".
func (p *proc) exitString() string {
	if p.waitErr == nil {
		return "0"
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "signal " + ws.Signal().String()
		}
		return fmt.Sprint(ee.ExitCode())
	}
	return p.waitErr.Error()
}

// KillAll kills every child's process group and waits until they are
// reaped; no child can be started afterwards. It is idempotent.
func (s *supervisor) KillAll() {
	s.mu.Lock()
	s.closed = true
	procs := make([]*proc, 0, len(s.procs))
	for p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	for _, p := range procs {
		p.signal(syscall.SIGKILL)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	}
}

// stopAll sends SIGTERM to the running ones of procs and waits up to limit
// for them, killing the rest.
func stopAll(procs []*proc, limit time.Duration) {
	var wg sync.WaitGroup
	for _, p := range procs {
		if p == nil || p.exited() {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); p.stop(syscall.SIGTERM, limit) }()
	}
	wg.Wait()
}
