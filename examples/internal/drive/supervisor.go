package drive

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// ErrClosed is returned by Supervisor.Start once KillAll was called.
var ErrClosed = errors.New("drive: shutting down")

// Supervisor owns every child process of a driver. Each child runs in its
// own process group with Pdeathsig, so that a driver that dies for any
// reason takes its children with it, and KillAll ends them on every exit
// path. Its methods may be called from any goroutine.
type Supervisor struct {
	mu     sync.Mutex
	procs  map[*Proc]struct{}
	closed bool
}

// NewSupervisor returns a Supervisor with no child.
func NewSupervisor() *Supervisor { return &Supervisor{procs: map[*Proc]struct{}{}} }

// Proc is one child process: a provider or a gateway.
type Proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd

	done     chan struct{} // closed once the process has been reaped
	exitedAt time.Time     // set before done is closed
	waitErr  error         // set before done is closed
}

// Start runs bin with args and env; its stdout and stderr are appended to
// logPath. It fails with ErrClosed after KillAll.
func (s *Supervisor) Start(name, bin string, args, env []string, logPath string) (*Proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
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
	p := &Proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
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

// KillAll kills every child's process group and waits until they are
// reaped (up to 5 s each); no child can be started afterwards. It is
// idempotent and safe to call from a signal handler goroutine.
func (s *Supervisor) KillAll() {
	s.mu.Lock()
	s.closed = true
	procs := make([]*Proc, 0, len(s.procs))
	for p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	for _, p := range procs {
		p.Signal(syscall.SIGKILL)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	}
}

// StopAll sends SIGTERM to the running ones of procs (nil ones are
// skipped) and waits up to limit for them, killing the rest.
func StopAll(procs []*Proc, limit time.Duration) {
	var wg sync.WaitGroup
	for _, p := range procs {
		if p == nil || p.Exited() {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop(syscall.SIGTERM, limit) }()
	}
	wg.Wait()
}

// Name is the name the process was started with.
func (p *Proc) Name() string { return p.name }

// LogPath is the file its stdout and stderr go to.
func (p *Proc) LogPath() string { return p.logPath }

// Done is closed once the process has ended and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// ExitedAt is when the process was reaped; zero before Done is closed.
func (p *Proc) ExitedAt() time.Time {
	select {
	case <-p.done:
		return p.exitedAt
	default:
		return time.Time{}
	}
}

// Signal sends sig to the process's group.
func (p *Proc) Signal(sig syscall.Signal) { _ = syscall.Kill(-p.cmd.Process.Pid, sig) }

// Exited tells whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends sig, waits up to limit for the process to end, then kills
// its group and waits for it. It reports whether it had to kill.
func (p *Proc) Stop(sig syscall.Signal, limit time.Duration) (killed bool) {
	p.Signal(sig)
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-p.done:
		return false
	case <-t.C:
	}
	p.Signal(syscall.SIGKILL)
	<-p.done
	return true
}

// signaled returns the signal that ended the process, if one did; call it
// once Done is closed.
func (p *Proc) signaled() (syscall.Signal, bool) {
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal(), true
		}
	}
	return 0, false
}

// ExitString describes how the process ended: "0", "1", "SIGKILL"; call
// it once Done is closed.
func (p *Proc) ExitString() string {
	if p.waitErr == nil {
		return "0"
	}
	if sig, ok := p.signaled(); ok {
		return "SIG" + sigName(sig)
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		return fmt.Sprint(ee.ExitCode())
	}
	return p.waitErr.Error()
}

func sigName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "KILL"
	case syscall.SIGTERM:
		return "TERM"
	case syscall.SIGINT:
		return "INT"
	}
	return fmt.Sprint(int(s))
}
