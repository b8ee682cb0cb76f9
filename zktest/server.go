package zktest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// InstallHint is the command that installs ZooKeeper for this repository.
const InstallHint = "run `make zookeeper` (or `sudo scripts/install-zookeeper.sh`), " +
	"or point ZOOKEEPER_HOME at an unpacked Apache ZooKeeper release, " +
	"or ZOOKEEPER_CLASSPATH at its jars"

// ErrNotInstalled is returned when no ZooKeeper or no Java runtime is found.
var ErrNotInstalled = errors.New("zktest: ZooKeeper is not installed: " + InstallHint)

// debianJar is where Debian's and Ubuntu's zookeeper package puts the server.
// Its manifest's Class-Path names every dependency, so it is the whole classpath.
const debianJar = "/usr/share/java/zookeeper.jar"

// Runtime locates the java binary and the ZooKeeper classpath, in this order:
// $ZOOKEEPER_CLASSPATH, $ZOOKEEPER_HOME (lib/*.jar of a release), then the
// Debian package. It returns ErrNotInstalled when any is missing.
func Runtime() (java, classpath string, err error) {
	java = "java"
	if home := os.Getenv("JAVA_HOME"); home != "" {
		java = filepath.Join(home, "bin", "java")
	}
	if java, err = exec.LookPath(java); err != nil {
		return "", "", fmt.Errorf("%w (no java runtime: %v)", ErrNotInstalled, err)
	}
	if cp := os.Getenv("ZOOKEEPER_CLASSPATH"); cp != "" {
		return java, cp, nil
	}
	if home := os.Getenv("ZOOKEEPER_HOME"); home != "" {
		jars, _ := filepath.Glob(filepath.Join(home, "lib", "*.jar"))
		if len(jars) == 0 {
			return "", "", fmt.Errorf("%w (ZOOKEEPER_HOME=%q has no lib/*.jar)", ErrNotInstalled, home)
		}
		return java, strings.Join(jars, string(os.PathListSeparator)), nil
	}
	if _, err := os.Stat(debianJar); err != nil {
		return "", "", fmt.Errorf("%w (%s is missing)", ErrNotInstalled, debianJar)
	}
	return java, debianJar, nil
}

// Server is one ZooKeeper process of a Cluster. Its methods are safe for
// concurrent use.
type Server struct {
	// ID is the member's myid, from 1.
	ID int
	// ClientPort is the loopback port clients connect to.
	ClientPort int
	// SecureClientPort is the TLS port (the TLS option), else 0.
	SecureClientPort int

	peerPort, electionPort int
	dir                    string
	java, classpath        string
	jvmProps               []string
	cpus                   string      // taskset -c list, "" for no pinning
	pki                    *PKI        // the TLS option's, for four-letter words on SecureClientPort
	dumps                  atomic.Bool // the running JVM dumps the class archive at its exit (cds.go)

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been reaped
}

// Addr is the server's client address, "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.ClientPort)) }

// Dir is the server's data and log directory.
func (s *Server) Dir() string { return s.dir }

// CPUTime is the CPU the server's running JVM has used (user and system,
// every thread: the JIT's and the GC's too), read from Linux's
// /proc/<pid>/stat at its 10 ms tick: what a benchmark's load costs the
// server is the difference across it.
func (s *Server) CPUTime() (time.Duration, error) {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return 0, fmt.Errorf("zktest: server %d is not running", s.ID)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("zktest: server %d's CPU time: %w", s.ID, err)
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is the first; utime and stime the 12th and 13th.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("zktest: server %d's CPU time: unexpected /proc stat %q", s.ID, b)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("zktest: server %d's CPU time: %w", s.ID, err)
		}
		ticks += n
	}
	// USER_HZ is 100 on every Linux architecture Go supports (the kernel
	// scales to it whatever its own HZ); Go has no sysconf without cgo.
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	args := []string{
		"-Dzookeeper.log.dir=" + s.dir,
		"-Dzookeeper.admin.enableServer=false",
		"-Dzookeeper.4lw.commands.whitelist=*",
	}
	share, dumped := cdsArgs(s.java, s.classpath, s.jvmProps)
	args = append(append(append([]string{}, s.jvmProps...), share...), args...)
	args = append(args, "-cp", s.classpath, "org.apache.zookeeper.server.quorum.QuorumPeerMain",
		filepath.Join(s.dir, "zoo.cfg"))
	cmd := exec.Command(s.java, args...)
	if s.cpus != "" {
		// taskset execs the JVM in its own process, so the pid, the
		// signals and Pdeathsig below are the JVM's.
		cmd = exec.Command("taskset", append([]string{"-c", s.cpus, s.java}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// Kill the JVM if the test binary dies without cleaning up, and keep
	// it out of the terminal's process group so Ctrl-C reaches us first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		if dumped != nil {
			dumped(false)
		}
		return fmt.Errorf("zktest: start server %d: %w", s.ID, err)
	}
	done := make(chan struct{})
	s.dumps.Store(dumped != nil)
	go func() {
		_ = cmd.Wait()
		if dumped != nil {
			dumped(cmd.ProcessState.Exited())
		}
		logf.Close()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	return nil
}

func (s *Server) signal(sig syscall.Signal, wait time.Duration) error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(wait):
	}
	_ = cmd.Process.Kill()
	<-done
	return nil
}

// Stop ends the server with SIGTERM (SIGKILL after 5 s) and waits for it.
// Its data stays, so Restart resumes it. Stopping a stopped server is a no-op.
func (s *Server) Stop() error { return s.signal(syscall.SIGTERM, 5*time.Second) }

// Kill ends the server with SIGKILL, as a crash would, and waits for it.
func (s *Server) Kill() error { return s.signal(syscall.SIGKILL, 5*time.Second) }

// exited tells how the process ended, though nobody stopped it ("" while
// it runs or after a stop).
func (s *Server) exited() string {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil || done == nil {
		return ""
	}
	select {
	case <-done: // Wait has returned: ProcessState is set
		return cmd.ProcessState.String()
	default:
		return ""
	}
}

// logTail returns the last n lines of the server's log.
func (s *Server) logTail(n int) string {
	b, err := os.ReadFile(filepath.Join(s.dir, "server.log"))
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// Running tells whether the process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Mode asks the server for its role with the srvr four-letter word:
// "standalone", "leader" or "follower"; an error while it is not serving.
func (s *Server) Mode() (string, error) {
	out, err := fourLetter(s.Addr(), "srvr", time.Second)
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if mode, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return strings.TrimSpace(mode), nil
		}
	}
	return "", fmt.Errorf("zktest: server %d is not serving: %s", s.ID, strings.TrimSpace(out))
}

// ownsPort checks that the server answering on s's client port is s, by
// the data directory its conf four-letter word names: a port FreePorts
// reserved can be taken by another test's server before this JVM binds
// it, and that server's answers would pass for this one's start (the JVM
// itself then fails to bind and exits, and the test talks to a stranger).
func (s *Server) ownsPort() error {
	out, err := fourLetter(s.Addr(), "conf", time.Second)
	if err != nil {
		return err
	}
	if want := "dataDir=" + filepath.Join(s.dir, "data"); !strings.Contains(out, want) {
		return fmt.Errorf("zktest: port %d answers for another server (its conf has no %s)", s.ClientPort, want)
	}
	return nil
}

// Sessions lists the ids of the sessions connected to the server now, read
// with the cons four-letter word: on both ports with the TLS option, whose
// connection factory answers for its own connections only.
func (s *Server) Sessions() ([]int64, error) {
	out, err := fourLetter(s.Addr(), "cons", time.Second)
	if err != nil {
		return nil, err
	}
	if s.SecureClientPort != 0 && s.pki != nil {
		sec, err := s.pki.fourLetter(s.SecureAddr(), "cons", time.Second)
		if err != nil {
			return nil, err
		}
		out += sec
	}
	var ids []int64
	for rest := out; ; {
		_, after, ok := strings.Cut(rest, "sid=0x")
		if !ok {
			return ids, nil
		}
		end := strings.IndexFunc(after, func(r rune) bool { return !strings.ContainsRune("0123456789abcdef", r) })
		if end < 0 {
			end = len(after)
		}
		id, err := strconv.ParseUint(after[:end], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("zktest: cons: %w", err)
		}
		ids, rest = append(ids, int64(id)), after[end:]
	}
}

// Ephemerals lists the ephemeral nodes the server holds, by owning session,
// read with the dump four-letter word: the server's own record, which no
// client session (a test's own included) can get wrong. Only a standalone
// server or the leader knows every session's nodes.
func (s *Server) Ephemerals() (map[int64][]string, error) {
	out, err := fourLetter(s.Addr(), "dump", time.Second)
	if err != nil {
		return nil, err
	}
	_, list, ok := strings.Cut(out, "Sessions with Ephemerals")
	if !ok {
		return nil, fmt.Errorf("zktest: server %d is not serving: %s", s.ID, strings.TrimSpace(out))
	}
	list, _, _ = strings.Cut(list, "Connections with Ephemerals")
	nodes := map[int64][]string{}
	var owner int64
	sc := bufio.NewScanner(strings.NewReader(list))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "0x"):
			id, err := strconv.ParseUint(strings.TrimSuffix(line[2:], ":"), 16, 64)
			if err != nil {
				return nil, fmt.Errorf("zktest: dump: %w", err)
			}
			owner = int64(id)
			nodes[owner] = nodes[owner][:0:0]
		case strings.HasPrefix(line, "/"):
			nodes[owner] = append(nodes[owner], line)
		}
	}
	return nodes, nil
}

func fourLetter(addr, cmd string, timeout time.Duration) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte(cmd)); err != nil {
		return "", err
	}
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return sb.String(), nil
}

// FreePorts reserves n distinct loopback ports, then releases them for a
// server to bind. Another process may take one in between; Start retries
// with new ports when a server fails to come up.
//
// The ports are drawn below the kernel's ephemeral range
// (ip_local_port_range), which it hands out for port 0 and as the source
// port of every outgoing connection: a stopped server's port in that range
// was taken by some test's connection before the server's restart could
// bind it again (make stress: a restart "not serving after 30s", its port
// refusing connections).
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	lo, hi := reservedRange()
	for tries := 0; len(ports) < n; tries++ {
		var l net.Listener
		var err error
		if hi > lo && tries < 100*n {
			l, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(lo+rand.IntN(hi-lo)))
			if err != nil {
				continue // taken
			}
		} else if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("zktest: reserve a port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// reservedRange is where FreePorts draws from: [lo, hi), the 12,768 ports
// below the ephemeral range; an empty range when that is too low to leave
// room (FreePorts then asks for port 0). Read once: FreePorts is called
// for every server a test binary starts.
var reservedRange = sync.OnceValues(func() (lo, hi int) {
	hi = 32768 // Linux's default low end
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				hi = v
			}
		}
	}
	lo = hi - 12768
	if lo < 10000 {
		return 0, 0
	}
	return lo, hi
})
