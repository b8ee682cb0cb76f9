package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/sd"
)

// exitRefused is drain's status when it refused to leave the service with
// fewer than -min-up instances UP, or refused a node it cannot drain; the
// registry is unchanged.
const exitRefused = 3

// drainFlags are drain's (or undrain's) flags, built apart from runDrain so
// that help_test.go can hold the help text to them.
type drainFlags struct {
	common     *commonFlags
	minUp      int
	force, del bool
}

func newDrainFlags(undrain bool, stderr io.Writer) (*flag.FlagSet, *drainFlags) {
	name, help := "drain", drainHelp+drainOnlyHelp
	if undrain {
		name, help = "undrain", drainHelp
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &drainFlags{common: addCommonFlags(fs)}
	if !undrain {
		fs.IntVar(&f.minUp, "min-up", 1, "refuse when the drain would leave fewer instances of the service UP than this")
		fs.BoolVar(&f.force, "force", false, "drain even below -min-up")
		fs.BoolVar(&f.del, "delete", false, "drain a go-kit node (which has no status) by deleting it: it comes back only when its provider registers again")
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: gracekit %s [flags] <service> <id>\n\n%s\n", name, help)
		fs.PrintDefaults()
	}
	return fs, f
}

// drainAttempts bounds how often a drain reads and decides again when the
// node, or a node its -min-up guard counted, changed before its write.
const drainAttempts = 6

// runDrain is gracekit drain and gracekit undrain: a version-checked
// setData of the instance's node with sd.Drain's marker (or without it),
// which changes only the metadata keys the drain owns. It never creates a
// node, and deletes one only when told to (-delete, for a go-kit node,
// which has no status); the node's ACL decides who may. The -min-up guard
// and the write are one decision: the write goes in one multi with a
// version check of every node the guard counted, so two drains at once
// cannot each count the other UP and both land.
func runDrain(undrain bool) func(context.Context, []string, io.Writer, io.Writer) int {
	name := "drain"
	if undrain {
		name = "undrain"
	}
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		fs, f := newDrainFlags(undrain, stderr)
		pos, cfg, err := parseCommand(fs, f.common, args, 2, 2)
		if err != nil {
			return fail(stderr, err)
		}
		minUp, force, del := f.minUp, f.force, f.del
		if minUp < 0 {
			return fail(stderr, &usageError{fmt.Sprintf("-min-up %d: want 0 or more", minUp)})
		}
		if _, ok := cfg.codec.(sd.PlainCodec); ok {
			return refuse(stderr, noStatusRefusal(name, path.Join(cfg.basePath, pos[0], pos[1])))
		}
		reg, ctx, err := dial(ctx, cfg, true)
		if err != nil {
			return fail(stderr, err)
		}
		defer reg.close()
		if err := reg.checkBase(ctx); err != nil {
			return fail(stderr, err)
		}
		service, id := pos[0], pos[1]
		p := path.Join(reg.serviceDir(service), id)
		rewrite := sd.Drain
		if undrain {
			rewrite = sd.Undrain
		}
		codec := cfg.codec
		if _, ok := codec.(sd.GoKitCodec); ok {
			codec = cliCodec // go-kit nodes are told apart from JSON ones below
		}
		for attempt := 0; ; attempt++ {
			data, stat, err := reg.conn.Get(reg.full(p))
			switch {
			case errors.Is(err, zk.ErrNoNode):
				if err := reg.checkService(ctx, service); err != nil {
					return fail(stderr, err) // no such service: a typo in its name, likelier than in the id
				}
				return fail(stderr, &usageError{fmt.Sprintf("%s: no instance %q in service %q (no node %s): gracekit ls %s lists its ids", name, id, service, p, service)})
			case errors.Is(err, zk.ErrNoAuth):
				return fail(stderr, fmt.Errorf("gracekit: %s: may not read %s (its ACL): give -auth / %s the registry's credentials", name, p, envZKAuth))
			case err != nil:
				return fail(stderr, wrap(ctx, "read", p, err))
			}
			inst, decErr := codec.Decode(service, id, data)
			kind := ""
			if decErr == nil {
				kind = nodeKind(codec, id, inst)
			}
			if _, ok := cfg.codec.(sd.GoKitCodec); ok && kind == nodeCurator {
				return refuse(stderr, fmt.Sprintf("gracekit: %s: %s is no go-kit node (read with -layout %s): give -layout auto or curator", name, p, layoutGoKit))
			}
			var guard []any // a version check of each node the count read
			if !undrain && decErr == nil && kind != nodeTwin && inst.Metadata[sd.MetadataDrainedBy] == "" && !force {
				var up int
				up, guard, err = upAfterDrain(ctx, reg, service, id)
				if err != nil {
					return fail(stderr, err)
				}
				if up < minUp {
					now := up
					if inst.Status() == sd.StatusUp {
						now++
					}
					return refuse(stderr, fmt.Sprintf("gracekit: drain refused: %s has %d instances UP now; draining %s would leave %d, fewer than -min-up %d (give -force to drain anyway); nothing was changed",
						service, now, id, up, minUp))
				}
			}
			goKit := kind == nodeGoKit || kind == nodeTwin
			var (
				op  any
				out []byte
			)
			if goKit {
				if msg := goKitRefusal(name, p, id, inst, del); msg != "" {
					return refuse(stderr, msg)
				}
				op = &zk.DeleteRequest{Path: reg.full(p), Version: stat.Version}
			} else {
				out, err = rewrite(sd.CuratorCodec{}, service, id, data)
				var fe *sd.ForeignPayloadError
				switch {
				case errors.As(err, &fe):
					return refuse(stderr, "gracekit: "+err.Error())
				case errors.Is(err, sd.ErrNoStatus): // a data-less host:port node, read as auto
					return refuse(stderr, noStatusRefusal(name, p))
				case err != nil:
					return fail(stderr, fmt.Errorf("gracekit: %s %s: %w", name, p, err))
				}
				op = &zk.SetDataRequest{Path: reg.full(p), Data: out, Version: stat.Version}
			}
			failed, err := commit(reg, guard, op)
			switch {
			case err == nil:
			case failed >= 0 && failed < len(guard) || errors.Is(err, zk.ErrBadVersion):
				// A counted node changed or went, or the node itself
				// (its Registrar wrote): read them again and decide anew.
				if attempt+1 < drainAttempts {
					continue
				}
				return refuse(stderr, fmt.Sprintf("gracekit: %s refused: %s or the instances of %s it counted changed between its read and its write %d times in a row; nothing was changed: run it again", name, p, service, drainAttempts))
			case errors.Is(err, zk.ErrNoAuth) && goKit:
				return fail(stderr, fmt.Errorf("gracekit: drain: may not delete %s (its parent's ACL): give -auth / %s the registry's credentials", p, envZKAuth))
			case errors.Is(err, zk.ErrNoAuth):
				return fail(stderr, fmt.Errorf("gracekit: %s: may not write %s (its ACL): only the registry's writers may; give -auth / %s their credentials", name, p, envZKAuth))
			case errors.Is(err, zk.ErrNoNode):
				return fail(stderr, &usageError{fmt.Sprintf("%s: the instance %q of %q went meanwhile (no node %s); nothing was changed: look again with gracekit ls", name, id, service, p)})
			default:
				return fail(stderr, wrap(ctx, "write", p, err))
			}
			if goKit {
				fmt.Fprintf(stdout, "drained %s by deleting it (a go-kit node has no status): go-kit and gracekit consumers drop it; it comes back only when its provider registers again (restart it)\n", p)
			} else if undrain {
				fmt.Fprintf(stdout, "undrained %s: its status before the drain is back (%s); its Registrar, if any, then writes the one its owner wants, and a gracekit provider's go-kit twin returns with it\n", p, statusAfter(out, service, id))
			} else {
				fmt.Fprintf(stdout, "drained %s: OUT_OF_SERVICE, drained_by=%s; its provider flushes the gateways, removes its go-kit twin if it has one, and keeps it out until gracekit undrain\n", p, sd.DrainedByOperator)
			}
			return exitOK
		}
	}
}

const drainHelp = `What a drain reaches depends on the node's layout:
  Curator JSON (gracekit, Curator, Spring): the node gets instance_status
    OUT_OF_SERVICE, drained_by=operator and the status it had (drained_status);
    gracekit, Curator and Spring readers drop it; a gracekit provider flushes its
    gateways and deletes its go-kit twin, so go-kit consumers drop it too. Undrain
    restores the recorded status. Nothing else in the node changes.
  go-kit node (go-kit's own Registrar): no status to write. drain -delete deletes
    the node; it comes back only when its provider registers again (restart it).
  gracekit's go-kit twin (gokit~<id>): drain the instance's Curator node <id>;
    the twin follows it.
  plain host:port nodes: no status; stop the instance instead.`

// drainOnlyHelp is the part of drain's help about its own flags, which
// undrain does not take.
const drainOnlyHelp = `
A drain refuses to leave fewer than -min-up instances UP (-force overrides). The
count and the drain are one atomic decision: the drain's write and a version
check of every instance it counted UP go in one ZooKeeper multi, so when another
drain (or anything) changed one of them meanwhile, nothing is written and the
drain counts again: two drains at once cannot both take the service below -min-up.`

// noStatusRefusal says why a plain host:port node cannot be drained: it
// has no data, so no status; out of rotation there is its absence.
func noStatusRefusal(name, p string) string {
	return fmt.Sprintf("gracekit: %s refused: %s is a plain host:port node (no data), which stores no status: out of rotation there is the node's absence, which the instance's own Registrar decides (SetStatus OUT_OF_SERVICE deletes it); stop the instance instead; nothing was changed", name, p)
}

// refuse prints why drain changed nothing and returns exitRefused.
func refuse(stderr io.Writer, msg string) int {
	fmt.Fprintln(stderr, msg)
	return exitRefused
}

func statusAfter(data []byte, service, id string) sd.Status {
	inst, err := sd.CuratorCodec{}.Decode(service, id, data)
	if err != nil {
		return ""
	}
	return inst.Status()
}

// upAfterDrain counts the instances of service UP besides id: Curator
// nodes UP and not drained, and go-kit nodes; a twin counts only when its
// Curator node is not in the service (one instance, two nodes). guard
// checks the version of each node counted: the drain's write goes in one
// multi with it, so the count still holds when the write lands. A node
// not counted needs no check: its change can only add to the count.
func upAfterDrain(ctx context.Context, reg *registry, service, id string) (up int, guard []any, err error) {
	s, err := reg.scanService(ctx, service, false)
	if err != nil {
		return 0, nil, err
	}
	for _, n := range s.nodes {
		if n.name == id || n.readErr != nil || n.decErr != nil {
			continue
		}
		kind := nodeKind(reg.codec, n.name, n.inst)
		if kind == nodeTwin && (twinOf(n.name) == id || slices.Contains(s.names, twinOf(n.name))) {
			continue
		}
		if n.inst.Status() == sd.StatusUp && n.inst.Metadata[sd.MetadataDrainedBy] == "" {
			up++
			guard = append(guard, &zk.CheckVersionRequest{Path: reg.full(n.path), Version: n.stat.Version})
		}
	}
	return up, guard, nil
}

// commit writes op, the drain's setData or delete, in one multi with
// guard: all of it lands or none does. failed is the index of the op that
// failed, len(guard) for op itself, or -1 when no op's result says (the
// connection failed).
func commit(reg *registry, guard []any, op any) (failed int, err error) {
	res, err := reg.conn.Multi(append(slices.Clip(guard), op)...)
	if err == nil {
		return -1, nil
	}
	for i, r := range res {
		if r.Error != nil {
			return i, r.Error // ZooKeeper fails the ops after the first as inconsistent
		}
	}
	return -1, err
}

// goKitRefusal says why a node that has no status cannot be drained: a
// go-kit twin (its Curator node is what to drain), any undrain, and a
// go-kit node without -delete; "" when -delete may delete it.
func goKitRefusal(name, p, id string, inst sd.Instance, del bool) string {
	switch {
	case strings.HasPrefix(id, sd.GoKitTwinPrefix) || inst.Metadata[sd.MetadataTwinOf] != "":
		return fmt.Sprintf("gracekit: %s %s: a go-kit twin has no status; it follows its instance: %s the Curator node %s (under the provider's base path) and the twin goes and comes back with it",
			name, p, name, twinOf(id))
	case name == "undrain":
		return fmt.Sprintf("gracekit: undrain %s: a go-kit node has no status to restore; a drained (deleted) go-kit node comes back when its provider registers again: restart it", p)
	case !del:
		return fmt.Sprintf("gracekit: drain %s: a go-kit node has no status, so draining it means deleting it, and go-kit's Registrar does not create it again until its provider restarts; give -delete to do that", p)
	}
	return ""
}
