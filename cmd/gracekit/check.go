package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/sd"
)

// Kinds of finding check reports.
const (
	kindMalformed    = "malformed"         // a child whose data is not a Curator instance
	kindUnreadable   = "unreadable"        // a node the session may not read
	kindNotEphemeral = "not-ephemeral"     // an instance node that outlives its process
	kindDuplicate    = "duplicate-address" // one address:port under two ids of a service
	kindOpenACL      = "open-acl"          // a parent that lets anyone create, delete, write or change its ACL
	kindChildrenSize = "children-size"     // a service's children list nears jute.maxbuffer
	kindOrphanTwin   = "orphan-twin"       // a go-kit twin whose Curator node is gone
)

var findingKinds = []string{kindMalformed, kindUnreadable, kindNotEphemeral, kindDuplicate, kindOpenACL, kindChildrenSize, kindOrphanTwin}

// DefaultMaxBuffer is ZooKeeper's default jute.maxbuffer (0xfffff): a Java
// client refuses a reply larger than this, so a service whose children
// list outgrows it cannot be listed by Curator or Spring at all.
const DefaultMaxBuffer = 0xfffff

// finding is one problem check found.
type finding struct {
	Kind    string `json:"kind"`
	Path    string `json:"path"`
	Service string `json:"service,omitempty"`
	ID      string `json:"id,omitempty"`
	Detail  string `json:"detail"`
}

// checkOutput is check -o json.
type checkOutput struct {
	BasePath string    `json:"base_path"`
	Time     msTime    `json:"time"`
	Services int       `json:"services"`
	Nodes    int       `json:"nodes"` // children of the service nodes
	Findings []finding `json:"findings"`
}

// checkLimits are check's thresholds.
type checkLimits struct {
	maxBuffer int
	ratio     float64
}

// checkFlags are check's flags, built apart from runCheck so that
// help_test.go can hold the help text to them.
type checkFlags struct {
	common              *commonFlags
	lim                 checkLimits
	ignore, curatorBase string
}

func newCheckFlags(stderr io.Writer) (*flag.FlagSet, *checkFlags) {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &checkFlags{common: addCommonFlags(fs)}
	fs.IntVar(&f.lim.maxBuffer, "max-buffer", DefaultMaxBuffer, "the clients' jute.maxbuffer in bytes")
	fs.Float64Var(&f.lim.ratio, "buffer-ratio", 0.75, "report a children list larger than this share of -max-buffer")
	fs.StringVar(&f.ignore, "ignore", "", "comma-separated finding kinds not to report: "+strings.Join(findingKinds, ", "))
	fs.StringVar(&f.curatorBase, "curator-base", "", "where the Curator nodes of go-kit twins are, when the twins stand apart under a go-kit path (default: -base-path)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gracekit check [flags] [service]")
		fs.PrintDefaults()
	}
	return fs, f
}

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, f := newCheckFlags(stderr)
	pos, cfg, err := parseCommand(fs, f.common, args, 0, 1)
	if err != nil {
		return fail(stderr, err)
	}
	lim, ignore, curatorBase := f.lim, &f.ignore, &f.curatorBase
	if lim.maxBuffer < 1 || lim.ratio <= 0 || lim.ratio > 1 {
		return fail(stderr, &usageError{fmt.Sprintf("-max-buffer %d / -buffer-ratio %v: want a positive size and a ratio in (0, 1]", lim.maxBuffer, lim.ratio)})
	}
	skip := map[string]bool{}
	for _, k := range strings.Split(*ignore, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if !slices.Contains(findingKinds, k) {
			return fail(stderr, &usageError{fmt.Sprintf("-ignore %q: want kinds among %s", k, strings.Join(findingKinds, ", "))})
		}
		skip[k] = true
	}

	reg, ctx, err := dial(ctx, cfg, true)
	if err != nil {
		return fail(stderr, err)
	}
	defer reg.close()
	var found []finding
	if len(pos) == 0 {
		// The base path is the parent of every service node.
		acl, _, err := reg.conn.GetACL(reg.full(cfg.basePath))
		switch {
		case err == nil:
			found = append(found, aclFindings(cfg.basePath, "", acl)...)
		case errors.Is(err, zk.ErrNoNode):
		case nodeError(err) && ctx.Err() == nil:
			found = append(found, finding{Kind: kindUnreadable, Path: cfg.basePath, Detail: "ACL: " + err.Error()})
		default:
			return fail(stderr, wrap(ctx, "read the ACL of", cfg.basePath, err))
		}
	}
	scans, err := reg.scan(ctx, pos, true)
	if err != nil {
		return fail(stderr, err)
	}
	out := checkOutput{BasePath: cfg.basePath, Time: msTime{time.Now().UTC()}, Services: len(scans), Findings: []finding{}}
	if *curatorBase != "" && sd.CheckRegistrarOptions(sd.BasePath(*curatorBase)) != nil {
		return fail(stderr, &usageError{fmt.Sprintf("-curator-base %q: want an absolute ZooKeeper path such as %s", *curatorBase, sd.DefaultBasePath)})
	}
	for _, s := range scans {
		out.Nodes += len(s.nodes)
		found = append(found, checkService(s, reg.codec, lim)...)
		f, err := orphanTwins(ctx, reg, s, *curatorBase)
		if err != nil {
			return fail(stderr, err)
		}
		found = append(found, f...)
	}
	for _, f := range found {
		if !skip[f.Kind] {
			out.Findings = append(out.Findings, f)
		}
	}
	if cfg.json {
		err = writeJSON(stdout, out)
	} else {
		err = writeCheckText(stdout, out)
	}
	if err != nil {
		return fail(stderr, fmt.Errorf("gracekit: write: %w", err))
	}
	if len(out.Findings) > 0 {
		return exitFindings
	}
	return exitOK
}

// checkService lints one service's node and children.
func checkService(s serviceScan, codec sd.Codec, lim checkLimits) []finding {
	var out []finding
	add := func(kind, p, id, detail string) {
		out = append(out, finding{Kind: kind, Path: p, Service: s.name, ID: id, Detail: detail})
	}
	if !s.exists {
		return nil
	}
	if s.listErr != nil {
		add(kindUnreadable, s.path, "", "children: "+s.listErr.Error())
	}
	if s.aclErr != nil {
		add(kindUnreadable, s.path, "", "ACL: "+s.aclErr.Error())
	}
	out = append(out, aclFindings(s.path, s.name, s.acl)...)
	if size := childrenReplySize(s.names); float64(size) > lim.ratio*float64(lim.maxBuffer) {
		add(kindChildrenSize, s.path, "", fmt.Sprintf("listing its %d children takes a reply of about %d bytes, %.0f%% of jute.maxbuffer (%d); past 100%% Java clients cannot list the service",
			len(s.names), size, 100*float64(size)/float64(lim.maxBuffer), lim.maxBuffer))
	}
	byAddr := map[string][]string{}
	for _, n := range s.nodes {
		if n.readErr != nil {
			add(kindUnreadable, n.path, n.name, n.readErr.Error())
		} else if n.decErr != nil {
			add(kindMalformed, n.path, n.name, n.decErr.Error())
		}
		if n.stat != nil {
			if k := ownerKind(n.stat); k != ownerSession {
				add(kindNotEphemeral, n.path, n.name, fmt.Sprintf("a %s node (ephemeralOwner 0x%x): it stays when its process dies", k, uint64(n.stat.EphemeralOwner)))
			}
		}
		// A twin shares its instance's address: one instance, two nodes.
		if n.readErr == nil && n.decErr == nil && nodeKind(codec, n.name, n.inst) != nodeTwin {
			hp := n.inst.HostPort()
			byAddr[hp] = append(byAddr[hp], n.name)
		}
	}
	for _, hp := range slices.Sorted(maps.Keys(byAddr)) {
		if ids := byAddr[hp]; len(ids) > 1 {
			add(kindDuplicate, s.path, "", fmt.Sprintf("%s is registered under %d ids: %s", hp, len(ids), strings.Join(ids, ", ")))
		}
	}
	return out
}

// orphanTwins reports each go-kit twin of s whose Curator node is gone:
// go-kit consumers still call an instance that gracekit and Curator
// readers no longer list, and nothing of gracekit's stop reaches them. The
// Curator node is looked for beside the twin, or under curatorBase.
func orphanTwins(ctx context.Context, reg *registry, s serviceScan, curatorBase string) ([]finding, error) {
	var out []finding
	for _, n := range s.nodes {
		if n.readErr != nil || n.decErr != nil || nodeKind(reg.codec, n.name, n.inst) != nodeTwin {
			continue
		}
		id := twinOf(n.name)
		where := path.Join(s.path, id)
		found := slices.Contains(s.names, id)
		if curatorBase != "" && curatorBase != reg.base {
			where = path.Join(curatorBase, s.name, id)
			ok, _, err := reg.conn.Exists(reg.full(where))
			if err != nil {
				return nil, wrap(ctx, "look up", where, err)
			}
			found = ok
		}
		if !found {
			out = append(out, finding{Kind: kindOrphanTwin, Path: n.path, Service: s.name, ID: n.name,
				Detail: fmt.Sprintf("a go-kit twin of %s, and there is no node %s: go-kit consumers call an instance no Curator reader lists (use -curator-base when the Curator nodes are under another base path)", id, where)})
		}
	}
	return out, nil
}

// aclFindings reports an ACL entry that lets anyone change a parent's
// children, data or ACL: with CREATE anyone can plant a fake instance,
// with DELETE remove a live one's node once it is gone from its session's
// view (or, for the base path, a whole empty service), with ADMIN take
// the node over.
func aclFindings(p, service string, acl []zk.ACL) []finding {
	var out []finding
	for _, a := range acl {
		if a.Scheme != "world" || a.ID != "anyone" {
			continue
		}
		if extra := a.Perms &^ zk.PermRead; extra != 0 {
			out = append(out, finding{Kind: kindOpenACL, Path: p, Service: service,
				Detail: fmt.Sprintf("world:anyone has %s; want world:anyone:r and the writers' own digest (README, ZooKeeper ACLs)", permString(a.Perms))})
		}
	}
	return out
}

// permString prints perms as zkCli does, "cdrwa".
func permString(p int32) string {
	var b strings.Builder
	for _, x := range []struct {
		bit int32
		c   byte
	}{{zk.PermCreate, 'c'}, {zk.PermDelete, 'd'}, {zk.PermRead, 'r'}, {zk.PermWrite, 'w'}, {zk.PermAdmin, 'a'}} {
		if p&x.bit != 0 {
			b.WriteByte(x.c)
		}
	}
	return b.String()
}

// childrenReplySize is the length of the frame a getChildren2 reply for
// names takes, the figure a client compares with its buffer limit
// (jute.maxbuffer in Java): the reply header (xid, zxid, err: 16 bytes),
// the vector's count, each name with its length, then the parent's Stat
// (68 bytes). go-zookeeper, so gracekit's Instancer, always asks for the
// Stat; Curator's plain getChildren reply is the same less the Stat.
func childrenReplySize(names []string) int {
	n := 16 + 4 + statSize
	for _, name := range names {
		n += 4 + len(name)
	}
	return n
}

// statSize is a serialized Stat: 6 longs and 5 ints.
const statSize = 6*8 + 5*4

func writeCheckText(w io.Writer, out checkOutput) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range out.Findings {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Kind, f.Path, f.Detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	what := fmt.Sprintf("%d findings", len(out.Findings))
	switch len(out.Findings) {
	case 0:
		what = "no findings"
	case 1:
		what = "1 finding"
	}
	_, err := fmt.Fprintf(w, "%s in %d services, %d nodes under %s\n", what, out.Services, out.Nodes, out.BasePath)
	return err
}
