package zktest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Defaults of a test server: short ticks so that session timeouts of a
// second or two are allowed and a 3-member ensemble elects in well under a
// second.
const (
	DefaultTickTime     = 200 * time.Millisecond
	DefaultStartTimeout = 30 * time.Second
	// DefaultContainerCheck is how often the server removes empty container
	// nodes (ZooKeeper's own default is one minute).
	DefaultContainerCheck = time.Second
	// DefaultMaxClientConnections is ZooKeeper's stock maxClientCnxns: the
	// connections one client host (all of loopback here) may hold to one
	// server. Tests run with it, so that they see what users see.
	DefaultMaxClientConnections = 60
)

// Option configures a Cluster.
type Option interface{ apply(*options) error }

type options struct {
	size           int
	tickTime       time.Duration
	containerCheck time.Duration
	startTimeout   time.Duration
	jvmArgs        []string
	maxCnxns       int
	isolatable     bool              // peer links through the test process (lag.go)
	cpus           string            // taskset -c list for every member's JVM; "" leaves affinity alone
	pki            *PKI              // TLS (secure.go)
	saslUsers      map[string]string // SASL (secure.go)
}

type optionFunc func(*options) error

func (f optionFunc) apply(o *options) error { return f(o) }

// Size sets the number of members: 1 (the default) starts a standalone
// server, 3 or more an ensemble.
func Size(n int) Option {
	return optionFunc(func(o *options) error {
		if n < 1 || n > 9 {
			return fmt.Errorf("zktest: invalid size %d (allowed 1 to 9)", n)
		}
		o.size = n
		return nil
	})
}

// TickTime sets ZooKeeper's tickTime. Sessions may last from 2 to 300 ticks.
func TickTime(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d < 10*time.Millisecond || d > 10*time.Second {
			return fmt.Errorf("zktest: invalid tick time %v (allowed 10ms to 10s)", d)
		}
		o.tickTime = d
		return nil
	})
}

// ContainerCheck sets how often the server deletes empty container nodes.
func ContainerCheck(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("zktest: invalid container check interval %v (minimum 100ms)", d)
		}
		o.containerCheck = d
		return nil
	})
}

// MaxClientConnections sets maxClientCnxns (0: no limit), for a fleet
// simulation whose processes all connect from loopback; the default is
// ZooKeeper's stock 60.
func MaxClientConnections(n int) Option {
	return optionFunc(func(o *options) error {
		if n < 0 {
			return fmt.Errorf("zktest: invalid max client connections %d (0 for no limit, or more)", n)
		}
		o.maxCnxns = n
		return nil
	})
}

// StartTimeout bounds how long Start waits for every member to serve.
func StartTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("zktest: invalid start timeout %v (must be positive)", d)
		}
		o.startTimeout = d
		return nil
	})
}

// DefaultJVMArgs start a small JVM quickly: tests start many servers on two
// cores. They trade the server's peak speed for start time.
var DefaultJVMArgs = []string{"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k"}

// JVMArgs replaces DefaultJVMArgs; benchmarks pass none, for a server
// running at full speed.
func JVMArgs(args ...string) Option {
	return optionFunc(func(o *options) error {
		o.jvmArgs = append([]string{}, args...)
		return nil
	})
}

// cpuList is what taskset -c accepts: CPU numbers and ranges, comma-separated.
var cpuList = regexp.MustCompile(`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`)

// CPUs runs every member's JVM on the listed CPUs only (taskset -c syntax,
// e.g. "0" or "0,2-3"), so that a benchmark's server and client do not take
// each other's cores. It needs util-linux's taskset.
func CPUs(list string) Option {
	return optionFunc(func(o *options) error {
		if !cpuList.MatchString(list) {
			return fmt.Errorf("zktest: invalid CPU list %q (want taskset -c syntax, e.g. 0 or 0,2-3)", list)
		}
		if _, err := exec.LookPath("taskset"); err != nil {
			return fmt.Errorf("zktest: CPUs(%q) needs taskset (apt-get install util-linux): %w", list, err)
		}
		o.cpus = list
		return nil
	})
}

// Cluster is a standalone ZooKeeper server or an ensemble on loopback ports.
type Cluster struct {
	// Servers are the members, Servers[i].ID == i+1.
	Servers []*Server

	dir       string
	opts      options
	links     *peerLinks // Isolatable ensembles only
	closeOnce sync.Once
}

// New starts a cluster for a test and stops it, removing its data, when the
// test ends. When ZooKeeper is not installed the test fails with the install
// command; it is skipped only under -short.
func New(tb testing.TB, opts ...Option) *Cluster {
	tb.Helper()
	if _, _, err := Runtime(); err != nil {
		if testing.Short() {
			tb.Skip("zktest: ZooKeeper tests need a server; skipped in -short mode")
		}
		tb.Fatal(err)
	}
	c, err := Start(tb.TempDir(), opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Start starts a cluster with its data under dir and waits until every
// member serves. The caller must Close it.
func Start(dir string, opts ...Option) (*Cluster, error) {
	o := options{size: 1, tickTime: DefaultTickTime, containerCheck: DefaultContainerCheck,
		startTimeout: DefaultStartTimeout, jvmArgs: DefaultJVMArgs, maxCnxns: DefaultMaxClientConnections}
	for _, opt := range opts {
		if err := opt.apply(&o); err != nil {
			return nil, err
		}
	}
	java, cp, err := Runtime()
	if err != nil {
		return nil, err
	}
	if o.pki != nil {
		if cp, err = nettyClasspath(cp); err != nil {
			return nil, err
		}
	}
	// A port reserved by FreePorts can be taken before the JVM binds it;
	// such a start fails and is retried with new ports.
	var lastErr error
	for attempt := range 3 {
		c, err := startOnce(filepath.Join(dir, fmt.Sprintf("zk%d", attempt)), java, cp, o)
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startOnce(dir, java, cp string, o options) (*Cluster, error) {
	per := 3
	if o.pki != nil {
		per = 4 // and secureClientPort
	}
	ports, err := FreePorts(per * o.size)
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, opts: o}
	props := append(append([]string{}, o.jvmArgs...), fmt.Sprintf("-Dznode.container.checkIntervalMs=%d", o.containerCheck.Milliseconds()))
	for i := range o.size {
		s := &Server{
			ID: i + 1, ClientPort: ports[per*i], peerPort: ports[per*i+1], electionPort: ports[per*i+2],
			dir: filepath.Join(dir, fmt.Sprintf("srv%d", i+1)), java: java, classpath: cp, jvmProps: props,
			cpus: o.cpus,
		}
		if o.pki != nil {
			s.SecureClientPort, s.pki = ports[per*i+3], o.pki
		}
		c.Servers = append(c.Servers, s)
	}
	if o.isolatable && o.size > 1 {
		if c.links, err = newPeerLinks(c.Servers); err != nil {
			return nil, err
		}
	}
	for _, s := range c.Servers {
		if err := c.writeConfig(s); err != nil {
			return nil, err
		}
	}
	for _, s := range c.Servers {
		if err := s.start(); err != nil {
			_ = c.Close()
			return nil, err
		}
	}
	if err := c.WaitServing(o.startTimeout); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) writeConfig(s *Server) error {
	if err := os.MkdirAll(filepath.Join(s.dir, "data"), 0o755); err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	tick := c.opts.tickTime.Milliseconds()
	var b strings.Builder
	fmt.Fprintf(&b, "tickTime=%d\ninitLimit=20\nsyncLimit=10\n", tick)
	fmt.Fprintf(&b, "dataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n", filepath.Join(s.dir, "data"), s.ClientPort)
	fmt.Fprintf(&b, "minSessionTimeout=%d\nmaxSessionTimeout=%d\n", 2*tick, 300*tick)
	fmt.Fprintf(&b, "maxClientCnxns=%d\n", c.opts.maxCnxns)
	b.WriteString("admin.enableServer=false\n4lw.commands.whitelist=*\n")
	sec, props, err := c.secureConfig(s)
	if err != nil {
		return err
	}
	b.WriteString(sec)
	s.jvmProps = append(append([]string{}, s.jvmProps...), props...)
	if len(c.Servers) > 1 {
		b.WriteString("standaloneEnabled=false\nreconfigEnabled=false\n")
		for _, m := range c.Servers {
			fmt.Fprintf(&b, "server.%d=127.0.0.1:%d:%d\n", m.ID, c.links.port(s, m), m.electionPort)
		}
		if err := os.WriteFile(filepath.Join(s.dir, "data", "myid"), fmt.Appendf(nil, "%d\n", s.ID), 0o644); err != nil {
			return fmt.Errorf("zktest: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(s.dir, "zoo.cfg"), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	return nil
}

// Addrs lists the members' client addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// ConnectString is Addrs joined with commas, as ZooKeeper clients take it.
func (c *Cluster) ConnectString() string { return strings.Join(c.Addrs(), ",") }

// WaitServing waits until every running member serves requests.
func (c *Cluster) WaitServing(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	for {
		var notReady error
		for _, s := range c.Servers {
			if !s.Running() {
				continue
			}
			if how := s.exited(); how != "" { // waiting on would see nothing but a refused port
				return fmt.Errorf("zktest: server %d (%s) exited while starting (%s; a port of its taken?); its log ends:\n%s", s.ID, s.Addr(), how, s.logTail(20))
			}
			if _, err := s.Mode(); err != nil {
				notReady = fmt.Errorf("server %d (%s): %w", s.ID, s.Addr(), err)
				break
			}
			if err := s.ownsPort(); err != nil {
				notReady = fmt.Errorf("server %d (%s): %w", s.ID, s.Addr(), err)
				break
			}
			if err := s.secureListening(deadline); err != nil { // it binds after the plaintext port
				notReady = fmt.Errorf("server %d (%s): %w", s.ID, s.SecureAddr(), err)
				break
			}
		}
		if notReady == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("zktest: not serving after %v: %w (logs in %s)", timeout, notReady, c.dir)
		}
		<-ticker.C
	}
}

// Leader returns the member that leads: Servers[0] when standalone.
func (c *Cluster) Leader() (*Server, error) {
	for _, s := range c.Servers {
		if !s.Running() {
			continue
		}
		mode, err := s.Mode()
		if err == nil && (mode == "leader" || mode == "standalone") {
			return s, nil
		}
	}
	return nil, errors.New("zktest: no member leads")
}

// Restart starts a stopped or killed member again and waits until the
// cluster serves.
func (c *Cluster) Restart(s *Server) error {
	if err := s.start(); err != nil {
		return err
	}
	return c.WaitServing(c.opts.startTimeout)
}

// StopAll stops every member; StartAll brings them back with their data.
func (c *Cluster) StopAll() error {
	var wg sync.WaitGroup
	for _, s := range c.Servers {
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Stop() }()
	}
	wg.Wait()
	return nil
}

// StartAll restarts every stopped member and waits until they serve.
func (c *Cluster) StartAll() error {
	for _, s := range c.Servers {
		if err := s.start(); err != nil {
			return err
		}
	}
	return c.WaitServing(c.opts.startTimeout)
}

// Close kills every member and waits for the processes to end. The data
// directory is left to its owner (t.TempDir removes it). Close is idempotent.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		var wg sync.WaitGroup
		for _, s := range c.Servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if s.dumps.Load() {
					// A killed JVM dumps no class archive; a loaded
					// machine took over 5 s (Stop's bound) to dump one.
					_ = s.signal(syscall.SIGTERM, 30*time.Second)
					return
				}
				_ = s.Kill()
			}()
		}
		wg.Wait()
		if c.links != nil {
			c.links.close()
		}
	})
	return nil
}
