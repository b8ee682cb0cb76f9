package zktest

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CopyOf makes a standalone Cluster, not started, whose one server holds a
// copy of s's data as it is now, on loopback ports of its own; it is killed
// when the test ends. Started (StartAll), it serves s's state as of the
// copy: a server behind every write s takes after it, as an ensemble member
// cut off from a later write is. A client that saw such a write must be
// refused by it, and ZooKeeper does refuse a handshake whose lastZxidSeen
// is ahead of its own last zxid. It has c's options.
//
// s may be running: ZooKeeper writes its transaction log in whole,
// checksummed transactions and reads a log up to its last whole one, so a
// copy taken while s writes ends at a transaction boundary.
func (c *Cluster) CopyOf(tb testing.TB, s *Server) *Cluster {
	tb.Helper()
	cp, err := c.copyOf(tb.TempDir(), s)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cp.Close() })
	return cp
}

func (c *Cluster) copyOf(dir string, s *Server) (*Cluster, error) {
	per := 3
	if c.opts.pki != nil {
		per = 4 // and secureClientPort, as its source has
	}
	ports, err := FreePorts(per)
	if err != nil {
		return nil, err
	}
	o := c.opts
	o.size = 1
	cp := &Cluster{dir: dir, opts: o}
	srv := &Server{
		ID: 1, ClientPort: ports[0], peerPort: ports[1], electionPort: ports[2],
		dir: filepath.Join(dir, "srv1"), java: s.java, classpath: s.classpath, jvmProps: s.jvmProps, cpus: s.cpus,
	}
	if c.opts.pki != nil {
		srv.SecureClientPort, srv.pki = ports[3], c.opts.pki
	}
	cp.Servers = []*Server{srv}
	if err := cp.writeConfig(srv); err != nil {
		return nil, err
	}
	if err := copyTree(filepath.Join(s.dir, "data", "version-2"), filepath.Join(srv.dir, "data", "version-2")); err != nil {
		return nil, fmt.Errorf("zktest: copy the data of server %d: %w", s.ID, err)
	}
	return cp, nil
}

// copyTree copies the regular files under src to dst. A transaction log
// is preallocated with zeros past its end; the copy keeps its length.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !d.Type().IsRegular() || strings.HasSuffix(p, ".tmp") {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
