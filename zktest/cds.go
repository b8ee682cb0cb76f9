package zktest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// A JVM start spends about a third of its CPU loading and verifying
// ZooKeeper's classes from their jars: 0.6 s of CPU a start on the 2-core
// machine, 0.4 s with the classes mapped from an AppCDS archive (and 0.12 s
// less before the port answers). make test starts over 200 JVMs. The
// archive is dumped by the first JVM that finds none (JDK 13+'s
// -XX:ArchiveClassesAtExit, at its exit) and mapped by every later one; a
// JVM that cannot map it (another JDK, a changed jar) runs without it, as
// -Xshare:auto does. JDK 19's -XX:+AutoCreateSharedArchive does the same
// by itself, but Debian 12 ships JDK 17.
//
// The archive lives in the user's cache directory, named by a hash of
// what it depends on: the java binary, the JDK's module image, the
// classpath's jars (path, size, time) and the JVM's -X options.

// cacheDir is where archives go (a var for the tests).
var cacheDir = os.UserCacheDir

var cds struct {
	sync.Mutex
	dumping map[string]bool // archives being dumped by a JVM of this process
}

// cdsArgs is the flags that map the archive of java, classpath and
// jvmArgs, or dump it when there is none yet; done, when not nil, is to be
// called once the dumping JVM exited, with whether it exited by itself
// (a killed JVM leaves no complete archive).
func cdsArgs(java, classpath string, jvmArgs []string) (args []string, done func(exited bool)) {
	if os.Getenv("GRACEKIT_ZKTEST_CDS") == "off" {
		return nil, nil
	}
	path, ok := cdsPath(java, classpath, jvmArgs)
	if !ok {
		return nil, nil
	}
	if _, err := os.Stat(path); err == nil {
		return []string{"-XX:SharedArchiveFile=" + path}, nil
	}
	cds.Lock()
	defer cds.Unlock()
	if cds.dumping[path] {
		return nil, nil // one dump at a time is enough
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, nil
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if cds.dumping == nil {
		cds.dumping = map[string]bool{}
	}
	cds.dumping[path] = true
	return []string{"-XX:ArchiveClassesAtExit=" + tmp}, func(exited bool) {
		cds.Lock()
		delete(cds.dumping, path)
		cds.Unlock()
		if st, err := os.Stat(tmp); exited && err == nil && st.Size() > 0 {
			// A rename is atomic: another process sees the whole
			// archive or none.
			if os.Rename(tmp, path) == nil {
				return
			}
		}
		_ = os.Remove(tmp)
	}
}

// cdsPath is where the archive of java, classpath and jvmArgs lives; false
// when something it depends on cannot be read.
func cdsPath(java, classpath string, jvmArgs []string) (string, bool) {
	dir, err := cacheDir()
	if err != nil {
		return "", false
	}
	real, err := filepath.EvalSymlinks(java)
	if err != nil {
		return "", false
	}
	h := sha256.New()
	stamp := func(p string) bool {
		st, err := os.Stat(p)
		if err != nil {
			return false
		}
		fmt.Fprintf(h, "%s %d %d\n", p, st.Size(), st.ModTime().UnixNano())
		return true
	}
	// bin/java's JDK: its lib/modules is what every JDK update changes.
	if !stamp(real) || !stamp(filepath.Join(filepath.Dir(filepath.Dir(real)), "lib", "modules")) {
		return "", false
	}
	for _, jar := range filepath.SplitList(classpath) {
		if !stamp(jar) {
			return "", false
		}
	}
	for _, a := range jvmArgs {
		if strings.HasPrefix(a, "-X") {
			fmt.Fprintln(h, a)
		}
	}
	return filepath.Join(dir, "gracekit", "zktest", "zookeeper-"+hex.EncodeToString(h.Sum(nil))[:16]+".jsa"), true
}
