package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/sd"
)

// Statuses ls prints for nodes that are not an instance.
const (
	statusMalformed  = "MALFORMED"
	statusUnreadable = "UNREADABLE"
)

// lsOutput is ls -o json.
type lsOutput struct {
	BasePath string      `json:"base_path"`
	Time     msTime      `json:"time"` // when the registry was read; ages are counted from it
	Services []lsService `json:"services"`
}

type lsService struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Exists bool   `json:"exists"`
	Error  string `json:"error,omitempty"` // the children could not be listed
	// Layout is what the readable nodes are: curator, gokit, mixed
	// (a migration from go-kit's sd/zk) or plain; empty when none is.
	Layout    string       `json:"layout,omitempty"`
	Instances []lsInstance `json:"instances"`
}

// lsInstance is one child of a service node.
type lsInstance struct {
	ID      string `json:"id"`
	Path    string `json:"path"`
	Address string `json:"address,omitempty"`
	Port    int    `json:"port,omitempty"`
	SSLPort int    `json:"ssl_port,omitempty"`
	// Status is UP or OUT_OF_SERVICE from payload.metadata.instance_status,
	// or MALFORMED / UNREADABLE (see Error).
	Status string `json:"status"`
	// DrainedBy says who drained the instance (sd.MetadataDrainedBy:
	// "operator"), empty when nobody did.
	DrainedBy string `json:"drained_by,omitempty"`
	// OutBy says who took the instance out of rotation (sd.OutOfServiceBy):
	// "operator" when drained (the operator wins), "health" while its
	// health check holds it OUT_OF_SERVICE (sd.MetadataOutBy); empty when
	// nobody said.
	OutBy string `json:"out_by,omitempty"`
	// Registered is Curator's registrationTimeUTC: when the instance first
	// registered. gracekit's Registrar and Curator keep it when they
	// re-create the node after a session expiry.
	Registered *msTime `json:"registered,omitempty"`
	// AgeSeconds counts from Registered (from Created when there is none).
	AgeSeconds float64 `json:"age_seconds"`
	// Created is the node's ctime: when the current node was created.
	Created msTime `json:"created,omitzero"`
	Czxid   int64  `json:"czxid"`
	// Owner is the session that owns the node (ephemeralOwner), in hex,
	// "" when OwnerKind is not "session".
	Owner string `json:"owner,omitempty"`
	// OwnerKind is session, persistent, container or ttl.
	OwnerKind string `json:"owner_kind,omitempty"`
	// Creator says that Owner is the session that created this node and
	// the node ends with it, which ZooKeeper guarantees for an ephemeral
	// node and only for one: false for persistent, container and TTL nodes.
	Creator  bool              `json:"creator"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Error    string            `json:"error,omitempty"`
	// Kind is what the node is: curator, gokit (go-kit's sd/zk Registrar
	// wrote it), twin (a gracekit provider's node for go-kit consumers,
	// fxmodule.GoKitRegistration; TwinOf names its Curator node) or plain;
	// empty for a node that could not be read.
	Kind   string `json:"kind,omitempty"`
	TwinOf string `json:"twin_of,omitempty"`
}

// lsFlags are ls's flags, built apart from runLs so that help_test.go can
// hold the help text to them.
type lsFlags struct {
	common *commonFlags
	status string
}

func newLsFlags(stderr io.Writer) (*flag.FlagSet, *lsFlags) {
	fs := flag.NewFlagSet("ls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &lsFlags{common: addCommonFlags(fs)}
	fs.StringVar(&f.status, "status", "", "list only the instances with this status: UP, OUT_OF_SERVICE, MALFORMED or UNREADABLE")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gracekit ls [flags] [service]")
		fs.PrintDefaults()
	}
	return fs, f
}

func runLs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, f := newLsFlags(stderr)
	common, status := f.common, &f.status
	pos, cfg, err := parseCommand(fs, common, args, 0, 1)
	if err != nil {
		return fail(stderr, err)
	}
	switch *status {
	case "", string(sd.StatusUp), string(sd.StatusOutOfService), statusMalformed, statusUnreadable:
	default:
		return fail(stderr, &usageError{fmt.Sprintf("-status %q: want %s, %s, %s or %s", *status, sd.StatusUp, sd.StatusOutOfService, statusMalformed, statusUnreadable)})
	}
	reg, ctx, err := dial(ctx, cfg, true)
	if err != nil {
		return fail(stderr, err)
	}
	defer reg.close()
	scans, err := reg.scan(ctx, pos, false)
	if err != nil {
		return fail(stderr, err)
	}
	out := lsResult(cfg.basePath, cfg.codec, scans, time.Now())
	if *status != "" {
		for i := range out.Services {
			s := &out.Services[i]
			s.Instances = slices.DeleteFunc(s.Instances, func(in lsInstance) bool { return in.Status != *status })
		}
	}
	if cfg.json {
		err = writeJSON(stdout, out)
	} else {
		err = writeLsText(stdout, out)
	}
	if err != nil {
		return fail(stderr, fmt.Errorf("gracekit: write: %w", err))
	}
	return exitOK
}

func lsResult(base string, codec sd.Codec, scans []serviceScan, now time.Time) lsOutput {
	out := lsOutput{BasePath: base, Time: msTime{now.UTC()}, Services: []lsService{}}
	for _, s := range scans {
		svc := lsService{Name: s.name, Path: s.path, Exists: s.exists, Instances: []lsInstance{}}
		if s.listErr != nil {
			svc.Error = s.listErr.Error()
		}
		svc.Layout = serviceLayout(s.nodes, codec)
		for _, n := range s.nodes {
			li := lsNode(n, now)
			if n.readErr == nil && n.decErr == nil {
				if li.Kind = nodeKind(codec, n.name, n.inst); li.Kind == nodeTwin {
					li.TwinOf = twinOf(n.name)
				}
			}
			svc.Instances = append(svc.Instances, li)
		}
		out.Services = append(out.Services, svc)
	}
	return out
}

func lsNode(n nodeScan, now time.Time) lsInstance {
	li := lsInstance{ID: n.name, Path: n.path}
	var st zk.Stat
	if n.stat != nil {
		st = *n.stat
	}
	var since time.Time
	if n.stat != nil { // also for a node we may not read: its Stat needs no permission
		li.Created = msTime{time.UnixMilli(st.Ctime).UTC()}
		li.Czxid = st.Czxid
		li.OwnerKind = ownerKind(&st)
		li.Owner = ownerHex(&st)
		li.Creator = li.OwnerKind == ownerSession
		since = li.Created.Time
	}
	switch {
	case n.readErr != nil:
		li.Status, li.Error = statusUnreadable, n.readErr.Error()
	case n.decErr != nil:
		li.Status, li.Error = statusMalformed, n.decErr.Error()
	default:
		li.Address, li.Port, li.SSLPort = n.inst.Address, n.inst.Port, n.inst.SSLPort
		li.Status = string(n.inst.Status())
		li.Metadata = n.inst.Metadata
		li.DrainedBy = n.inst.Metadata[sd.MetadataDrainedBy]
		li.OutBy = sd.OutOfServiceBy(n.inst)
		if !n.inst.RegistrationTime.IsZero() {
			rt := msTime{n.inst.RegistrationTime.UTC()}
			li.Registered = &rt
			since = rt.Time
		}
	}
	if !since.IsZero() {
		li.AgeSeconds = now.Sub(since).Round(time.Millisecond).Seconds()
	}
	return li
}

func writeLsText(w io.Writer, out lsOutput) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// New columns go last: scripts read these by position (-o json is
	// the stable form).
	fmt.Fprintln(tw, "SERVICE\tID\tADDRESS\tPORT\tSSLPORT\tSTATUS\tREGISTERED\tAGE\tOWNER\tCREATOR\tKIND")
	for _, s := range out.Services {
		switch {
		case s.Error != "":
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%s\t-\t-\t-\t-\t-\t(%s)\n", s.Name, statusUnreadable, s.Error)
		case !s.Exists:
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t(no node %s)\n", s.Name, s.Path)
		case len(s.Instances) == 0:
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t(no instances)\n", s.Name)
		}
		for _, i := range s.Instances {
			addr, port, ssl, reg, age, owner, creator := "-", "-", "-", "-", "-", "-", "-"
			if i.Address != "" {
				addr = i.Address
			}
			if i.Port != 0 {
				port = strconv.Itoa(i.Port)
			}
			if i.SSLPort != 0 {
				ssl = strconv.Itoa(i.SSLPort)
			}
			if i.Registered != nil {
				reg = i.Registered.Format(time.RFC3339)
			}
			if i.Registered != nil || !i.Created.IsZero() {
				age = formatAge(time.Duration(i.AgeSeconds * float64(time.Second)))
			}
			if i.Owner != "" {
				owner = i.Owner
			}
			switch {
			case i.Creator:
				creator = "yes"
			case i.OwnerKind != "":
				creator = "no (" + i.OwnerKind + ")"
			}
			status := i.Status
			if i.OutBy != "" {
				status += " (by " + i.OutBy + ")"
			}
			kind := "-"
			switch {
			case i.TwinOf != "":
				kind = i.Kind + " of " + i.TwinOf
			case i.Kind != "":
				kind = i.Kind
			}
			line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", s.Name, i.ID, addr, port, ssl, status, reg, age, owner, creator, kind)
			if i.Error != "" {
				line += "\t(" + i.Error + ")"
			}
			fmt.Fprintln(tw, line)
		}
	}
	return tw.Flush()
}

// formatAge prints a duration the way kubectl does: two units at most.
func formatAge(d time.Duration) string {
	if d < 0 {
		d = 0 // a clock ahead of ours
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	case s < 48*3600:
		return fmt.Sprintf("%dh%dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%dh", s/86400, s%86400/3600)
}

// msTime is a time that JSON carries with milliseconds, always three
// digits, as the README shows; time.Time's own encoding gives one to nine.
type msTime struct{ time.Time }

const msLayout = "2006-01-02T15:04:05.000Z07:00"

func (t msTime) MarshalJSON() ([]byte, error) {
	return []byte(`"` + t.Format(msLayout) + `"`), nil
}

// writeJSON writes v as one indented JSON document.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
