package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/sd"
)

// runDrain is gracekit drain and gracekit undrain: a version-checked
// setData of the instance's node with sd.Drain's marker (or without it).
// It never creates or deletes a node; the node's ACL decides who may.
func runDrain(undrain bool) func(context.Context, []string, io.Writer, io.Writer) int {
	name := "drain"
	if undrain {
		name = "undrain"
	}
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		fs.SetOutput(stderr)
		common := addCommonFlags(fs)
		fs.Usage = func() {
			fmt.Fprintf(stderr, "usage: gracekit %s [flags] <service> <id>\n", name)
			fs.PrintDefaults()
		}
		pos, cfg, err := parseCommand(fs, common, args, 2, 2)
		if err != nil {
			return fail(stderr, err)
		}
		if _, ok := cfg.codec.(sd.CuratorCodec); !ok {
			return fail(stderr, &usageError{name + ": plain nodes carry no data to mark: a drain needs -layout curator"})
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
		for attempt := 0; ; attempt++ {
			data, stat, err := reg.conn.Get(reg.full(p))
			switch {
			case errors.Is(err, zk.ErrNoNode):
				return fail(stderr, &usageError{fmt.Sprintf("%s: no instance %q in service %q (no node %s): gracekit ls %s lists its ids", name, id, service, p, service)})
			case errors.Is(err, zk.ErrNoAuth):
				return fail(stderr, fmt.Errorf("gracekit: %s: may not read %s (its ACL): give -auth / %s the registry's credentials", name, p, envZKAuth))
			case err != nil:
				return fail(stderr, wrap(ctx, "read", p, err))
			}
			out, err := rewrite(reg.codec, service, id, data)
			if err != nil {
				return fail(stderr, fmt.Errorf("gracekit: %s %s: %w", name, p, err))
			}
			_, err = reg.conn.Set(reg.full(p), out, stat.Version)
			switch {
			case errors.Is(err, zk.ErrBadVersion) && attempt < 5:
				continue // its Registrar wrote meanwhile: read it again
			case errors.Is(err, zk.ErrNoAuth):
				return fail(stderr, fmt.Errorf("gracekit: %s: may not write %s (its ACL): only the registry's writers may; give -auth / %s their credentials", name, p, envZKAuth))
			case errors.Is(err, zk.ErrNoNode):
				return fail(stderr, &usageError{fmt.Sprintf("%s: the instance %q of %q went meanwhile (no node %s)", name, id, service, p)})
			case err != nil:
				return fail(stderr, wrap(ctx, "write", p, err))
			}
			if undrain {
				fmt.Fprintf(stdout, "undrained %s: its Registrar puts it back in rotation (a node that no gracekit Registrar keeps stays OUT_OF_SERVICE)\n", p)
			} else {
				fmt.Fprintf(stdout, "drained %s: OUT_OF_SERVICE, drained_by=%s; its provider flushes the gateways and keeps it out until gracekit undrain\n", p, sd.DrainedByOperator)
			}
			return exitOK
		}
	}
}
