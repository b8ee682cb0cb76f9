package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gracekit/gracekit/zktest"
)

// Pinning: in production the ZooKeeper server runs on other machines, so
// the bench gives the server and the measuring client cores of their own
// instead of letting the scheduler trade them back and forth. The server
// (every JVM a suite starts) gets the first CPU this process may use, the
// client the rest, with GOMAXPROCS to match.

var pinFlag = flag.Bool("pin", true, "run the ZooKeeper servers on the first allowed CPU and this process on the others (needs 2 CPUs and taskset)")

// pinnedEnv marks the process already re-executed on the client's CPUs,
// with the split: <server cpus>/<client cpus>.
const pinnedEnv = "GRACEKIT_BENCH_PINNED"

// serverOptions are the zktest options every suite's servers start with:
// the server's CPUs once pinned, else none.
var serverOptions []zktest.Option

// pin splits the allowed CPUs between server and client and, on the
// first call, re-executes the bench on the client's CPUs: a thread's
// affinity is inherited by the threads it creates, not by the runtime's
// existing ones, so only a fresh process is pinned as a whole. It prints
// the BENCHENV line either way.
func pin() error {
	if v := os.Getenv(pinnedEnv); v != "" { // re-executed: the split is the parent's
		server, client, ok := strings.Cut(v, "/")
		if !ok {
			return fmt.Errorf("bench: %s=%q, want <server cpus>/<client cpus>", pinnedEnv, v)
		}
		if got, err := allowedCPUs(); err != nil || cpuString(got) != client {
			return fmt.Errorf("bench: pinned to CPUs %s, want %s (%v)", cpuString(got), client, err)
		}
		serverOptions = []zktest.Option{zktest.CPUs(server)}
		fmt.Printf("BENCHENV server_cpus=%s client_cpus=%s gomaxprocs=%d pinned=yes\n", server, client, runtime.GOMAXPROCS(0))
		return nil
	}
	cpus, err := allowedCPUs()
	if err != nil {
		return err
	}
	unpinned := func(why string) error {
		fmt.Fprintf(os.Stderr, "bench: WARNING: not pinned (%s): server and client share CPUs %s, so their figures include contention\n", why, cpuString(cpus))
		fmt.Printf("BENCHENV server_cpus=%s client_cpus=%s gomaxprocs=%d pinned=no\n", cpuString(cpus), cpuString(cpus), runtime.GOMAXPROCS(0))
		return nil
	}
	switch {
	case !*pinFlag:
		return unpinned("-pin=false")
	case len(cpus) < 2:
		return unpinned(fmt.Sprintf("%d CPU allowed, 2 needed", len(cpus)))
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return unpinned("no taskset for the server's JVM: apt-get install util-linux")
	}
	return reexec(cpus[:1], cpus[1:])
}

// reexec replaces the process with itself on the client's CPUs. It
// returns only on failure.
func reexec(server, client []int) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: pinning: %w", err)
	}
	runtime.LockOSThread() // the affinity is set on this thread, which execs
	var set unix.CPUSet
	for _, c := range client {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("bench: pinning to CPUs %s: %w", cpuString(client), err)
	}
	var env []string
	for _, kv := range os.Environ() { // the first of two equal keys wins
		if !strings.HasPrefix(kv, "GOMAXPROCS=") && !strings.HasPrefix(kv, pinnedEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, pinnedEnv+"="+cpuString(server)+"/"+cpuString(client), "GOMAXPROCS="+strconv.Itoa(len(client)))
	return fmt.Errorf("bench: re-executing pinned: %w", syscall.Exec(self, os.Args, env))
}

// cpuString is a CPU list as taskset -c reads it.
func cpuString(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// allowedCPUs lists the CPUs this process may run on.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("bench: reading the CPU affinity: %w", err)
	}
	var cpus []int
	for i := range 1024 {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus, nil
}
