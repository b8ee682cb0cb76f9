package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/sd"
)

// Events watch prints.
const (
	evPresent      = "present"      // in the service when the watch began
	evWatching     = "watching"     // the first read is done: what follows is live
	evAdded        = "added"        // a new node
	evRemoved      = "removed"      // a node went
	evStatus       = "status"       // instance_status changed (UP <-> OUT_OF_SERVICE)
	evChanged      = "changed"      // other data changed: address, port, metadata, or it became (un)readable
	evRecreated    = "recreated"    // deleted and created again between two reads (a new czxid)
	evDisconnected = "disconnected" // the view may be stale until "connected"
	evConnected    = "connected"    // back, and read again
	evExpired      = "expired"      // the watch's session expired; a new one reads everything again
)

// watchEvent is one line of watch -o json.
type watchEvent struct {
	Time      msTime `json:"time"`
	Event     string `json:"event"`
	Service   string `json:"service"`
	ID        string `json:"id,omitempty"`
	Path      string `json:"path,omitempty"`
	Address   string `json:"address,omitempty"`
	Port      int    `json:"port,omitempty"`
	SSLPort   int    `json:"ssl_port,omitempty"`
	Status    string `json:"status,omitempty"`
	DrainedBy string `json:"drained_by,omitempty"` // who drained it (gracekit drain)
	OutBy     string `json:"out_by,omitempty"`     // who took it out: operator or health (as ls)
	OldStatus string `json:"old_status,omitempty"` // for "status"
	Owner     string `json:"owner,omitempty"`
	Error     string `json:"error,omitempty"`
	Instances *int   `json:"instances,omitempty"` // for "watching" and "connected"
}

// watchFlags are watch's flags, built apart from runWatch so that
// help_test.go can hold the help text to them.
type watchFlags struct {
	common *commonFlags
	forD   time.Duration
	wait   bool
}

func newWatchFlags(stderr io.Writer) (*flag.FlagSet, *watchFlags) {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &watchFlags{common: addCommonFlags(fs)}
	fs.DurationVar(&f.forD, "for", 0, "stop after this long (default: until SIGINT)")
	fs.BoolVar(&f.wait, "wait", false, "wait for a service (or the base path) that does not exist yet, a provider about to start, instead of exiting 1 (2 for the base path)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gracekit watch [flags] [service]")
		fs.PrintDefaults()
	}
	return fs, f
}

func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, f := newWatchFlags(stderr)
	common, forD, wait := f.common, &f.forD, &f.wait
	pos, cfg, err := parseCommand(fs, common, args, 0, 1)
	if err != nil {
		return fail(stderr, err)
	}
	if *forD < 0 {
		return fail(stderr, &usageError{fmt.Sprintf("-for %v: want a positive duration", *forD)})
	}
	if *forD > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *forD)
		defer cancel()
	}
	reg, ctx, err := dial(ctx, cfg, false)
	if err != nil {
		return fail(stderr, err)
	}
	defer reg.close()
	enc := json.NewEncoder(stdout)
	var outMu sync.Mutex // watch-all's services print from goroutines of their own
	out := func(ev watchEvent) error {
		outMu.Lock()
		defer outMu.Unlock()
		if cfg.json {
			return enc.Encode(ev)
		}
		_, err := fmt.Fprintln(stdout, watchText(ev))
		return err
	}
	// With -wait, the base path and the service may appear later (a
	// provider about to start); a chroot that does not exist is a typo
	// either way. Without it they must exist, as for ls.
	check := reg.checkBase
	if *wait {
		check = reg.checkChroot
	}
	if err := check(ctx); err != nil {
		return fail(stderr, err)
	}
	if len(pos) == 0 {
		err = newAllWatcher(reg, out).run(ctx)
	} else {
		if !*wait {
			if err := reg.checkService(ctx, pos[0]); err != nil {
				if ns := (*noServiceError)(nil); errors.As(err, &ns) {
					ns.hint = "give -wait to watch it until it appears"
				}
				return fail(stderr, err)
			}
		}
		w := newWatcher(reg, pos[0])
		w.out = out
		reg.setOnEvent(w.onEvent)
		err = w.run(ctx)
		reg.setOnEvent(nil)
	}
	if err != nil && ctx.Err() == nil {
		return fail(stderr, err)
	}
	return exitOK
}

// allWatcher follows every service under the base path: a children watch
// on the base path starts a watcher for each service it lists, and the
// session's changes are printed once, with service "*".
type allWatcher struct {
	reg  *registry
	full string // the base path on the server
	out  func(watchEvent) error

	mu        sync.Mutex
	watchers  map[string]*watcher
	connected bool
	relist    bool
	notes     []watchEvent
	wake      chan struct{}
}

func newAllWatcher(reg *registry, out func(watchEvent) error) *allWatcher {
	a := &allWatcher{reg: reg, full: reg.full(reg.base), out: out, watchers: map[string]*watcher{},
		connected: true, relist: true, wake: make(chan struct{}, 1)}
	reg.setOnEvent(a.onEvent)
	return a
}

// onEvent runs on go-zookeeper's goroutine: it takes notes and hands the
// event to every service's watcher.
func (a *allWatcher) onEvent(ev zk.Event) {
	a.mu.Lock()
	note := func(kind string) {
		a.notes = append(a.notes, watchEvent{Time: msTime{time.Now().UTC()}, Event: kind, Service: "*", Path: a.reg.base})
	}
	switch {
	case ev.Type == zk.EventSession:
		switch ev.State {
		case zk.StateDisconnected, zk.StateConnecting:
			if a.connected {
				a.connected = false
				note(evDisconnected)
			}
		case zk.StateExpired:
			a.relist = true
			note(evExpired)
		case zk.StateHasSession:
			if !a.connected {
				a.connected, a.relist = true, true
			}
		}
	case ev.Type == zk.EventNotWatching, ev.Path == a.full:
		a.relist = true
	}
	ws := slices.Collect(maps.Values(a.watchers))
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
	for _, w := range ws {
		w.onEvent(ev)
	}
}

func (a *allWatcher) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		a.reg.setOnEvent(nil)
		cancel()
		wg.Wait()
	}()
	errc := make(chan error, 1)
	for {
		a.mu.Lock()
		notes, relist := a.notes, a.relist
		a.notes, a.relist = nil, false
		a.mu.Unlock()
		for _, n := range notes {
			if err := a.out(n); err != nil {
				return fmt.Errorf("gracekit: write: %w", err)
			}
		}
		if relist {
			// Each call arms a watch; go-zookeeper fires them all at once.
			names, err := a.list()
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if nodeError(err) {
					return fmt.Errorf("gracekit: watch %s: %w", a.reg.base, err)
				}
				// Down: listed again when the session is back.
			}
			slices.Sort(names)
			for _, name := range names {
				a.mu.Lock()
				_, ok := a.watchers[name]
				var w *watcher
				if !ok && sd.ValidNodeName(name) {
					w = newWatcher(a.reg, name)
					w.quiet = true
					w.out = a.out
					a.watchers[name] = w
				}
				a.mu.Unlock()
				if w == nil {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := w.run(ctx); err != nil {
						select {
						case errc <- err:
						default:
						}
					}
				}()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case <-a.wake:
		}
	}
}

// list lists the services, arming a children watch on the base path, or
// an exists watch while it is missing (a container base path goes with its
// last service; watch -wait starts before it exists).
func (a *allWatcher) list() ([]string, error) {
	for {
		names, _, _, err := a.reg.conn.ChildrenW(a.full)
		if !errors.Is(err, zk.ErrNoNode) {
			return names, err
		}
		ok, _, _, err := a.reg.conn.ExistsW(a.full)
		if err != nil || !ok {
			return nil, err
		}
		// Created between the two calls: the exists call armed only a data
		// watch, which no new service fires, so list it.
	}
}

func watchText(ev watchEvent) string {
	s := ev.Time.Format(msLayout) + "  " + fmt.Sprintf("%-12s", ev.Event)
	switch ev.Event {
	case evWatching, evConnected:
		return s + fmt.Sprintf(" %s %s: %d instances", ev.Service, ev.Path, *ev.Instances)
	case evDisconnected, evExpired:
		return s + " " + ev.Service
	}
	s += " " + ev.Service + "/" + ev.ID
	if ev.Address != "" {
		if ev.Port != 0 {
			s += "  " + ev.Address + ":" + strconv.Itoa(ev.Port)
		} else {
			s += "  " + ev.Address
		}
		if ev.SSLPort != 0 {
			s += " ssl:" + strconv.Itoa(ev.SSLPort)
		}
	}
	switch {
	case ev.OldStatus != "":
		s += "  " + ev.OldStatus + " -> " + ev.Status
	case ev.Status != "":
		s += "  " + ev.Status
	}
	if ev.OutBy != "" {
		s += " (by " + ev.OutBy + ")"
	}
	if ev.Error != "" {
		s += "  (" + ev.Error + ")"
	}
	return s
}

// watcher follows one service: a children watch on its node (an exists
// watch while it is missing) and a data watch on each child. ZooKeeper's
// watches are one-shot: each fired one is re-armed by the read that
// follows it. Events arrive through the registry's callback, so there is
// no goroutine per watch; run does all the reading, in the caller's
// goroutine.
type watcher struct {
	reg     *registry
	service string
	dir     string // inside the chroot
	full    string // on the server
	out     func(watchEvent) error

	quiet bool // watch-all prints the session's changes once, not per service

	mu        sync.Mutex
	pend      pending
	connected bool
	announce  bool // a "connected" line is owed: the connection dropped since the last
	wake      chan struct{}

	// Owned by run.
	known      map[string]row
	dataArmed  map[string]bool
	childArmed bool
	existArmed bool
}

// pending is what the events since the last read ask for.
type pending struct {
	all      bool            // list and read everything
	children bool            // list the children
	nodes    map[string]bool // read these children
	unchild  bool            // the children watch fired
	unexist  bool            // the exists watch fired
	expired  bool            // every watch is gone
	notes    []watchEvent    // session changes to print, in order
}

// row is what watch compares between two reads of a node.
type row struct {
	czxid    int64
	status   string
	address  string
	port     int
	sslPort  int
	metadata map[string]string
	owner    string
	err      string
}

func newWatcher(reg *registry, service string) *watcher {
	dir := reg.serviceDir(service)
	return &watcher{
		reg: reg, service: service, dir: dir, full: reg.full(dir),
		pend: pending{all: true}, connected: true, wake: make(chan struct{}, 1),
		known: map[string]row{}, dataArmed: map[string]bool{},
	}
}

// onEvent runs on go-zookeeper's goroutine: it only takes notes.
func (w *watcher) onEvent(ev zk.Event) {
	w.mu.Lock()
	p := &w.pend
	note := func(kind string) {
		w.announce = true
		if !w.quiet {
			p.notes = append(p.notes, watchEvent{Time: msTime{time.Now().UTC()}, Event: kind, Service: w.service})
		}
	}
	switch {
	case ev.Type == zk.EventSession:
		switch ev.State {
		case zk.StateDisconnected, zk.StateConnecting:
			if w.connected {
				w.connected = false
				note(evDisconnected)
			}
		case zk.StateExpired:
			p.expired, p.all = true, true
			note(evExpired)
		case zk.StateHasSession:
			if !w.connected {
				w.connected = true
				p.all = true
			}
		}
	case ev.Type == zk.EventNotWatching:
		p.all = true
		p.unchild, p.unexist = true, true
		if ev.Path != w.full {
			p.expired = true // lost watches on children: arm them all again
		}
	case ev.Path == w.full:
		p.children = true
		switch ev.Type {
		case zk.EventNodeChildrenChanged:
			p.unchild = true
		case zk.EventNodeCreated, zk.EventNodeDataChanged:
			p.unexist = true
		case zk.EventNodeDeleted:
			p.unchild, p.unexist = true, true
		}
	case path.Dir(ev.Path) == w.full:
		if p.nodes == nil {
			p.nodes = map[string]bool{}
		}
		p.nodes[path.Base(ev.Path)] = true
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watcher) take() pending {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pend
	w.pend = pending{}
	return p
}

// retry asks for a full read again after a failed one.
func (w *watcher) retry() {
	w.mu.Lock()
	w.pend.all = true
	w.mu.Unlock()
}

// run prints the service's changes until ctx ends, then returns nil; an
// error only when it cannot print.
func (w *watcher) run(ctx context.Context) error {
	first := true
	for {
		p := w.take()
		if ctx.Err() != nil {
			return nil
		}
		for _, n := range p.notes {
			if err := w.out(n); err != nil {
				return fmt.Errorf("gracekit: write: %w", err)
			}
		}
		if p.expired {
			clear(w.dataArmed)
		}
		if p.expired || p.unchild {
			w.childArmed = false
		}
		if p.expired || p.unexist {
			w.existArmed = false
		}
		for name := range p.nodes {
			w.dataArmed[name] = false
		}
		if p.all || p.children || len(p.nodes) > 0 || first {
			evs, err := w.sync(p, first)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if nodeError(err) { // the service node itself cannot be read
					return fmt.Errorf("gracekit: watch %s: %w", w.dir, err)
				}
				// The connection is down: read it all again once it is back.
				w.retry()
			} else {
				// One "connected" per drop, once the session is back: an
				// expiry is seen before its new session, and read twice.
				w.mu.Lock()
				announce := w.announce && w.connected
				if announce {
					w.announce = false
				}
				w.mu.Unlock()
				if first || announce {
					n := len(w.known)
					kind := evConnected
					if first {
						kind = evWatching
					}
					evs = append(evs, watchEvent{Time: msTime{time.Now().UTC()}, Event: kind, Service: w.service, Path: w.dir, Instances: &n})
				}
				first = false
				for _, ev := range evs {
					if err := w.out(ev); err != nil {
						return fmt.Errorf("gracekit: write: %w", err)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.wake:
		}
	}
}

// sync reads what p asks for, re-arming the watches that fired, and
// returns the changes against what it read before. On an error nothing
// changes but the watches armed meanwhile, and everything is read again.
func (w *watcher) sync(p pending, first bool) ([]watchEvent, error) {
	conn := w.reg.conn
	toRead := map[string]bool{}
	for name := range p.nodes {
		toRead[name] = true
	}
	gone := map[string]bool{}
	if p.all || p.children || first {
		names, err := w.list()
		if err != nil {
			return nil, err
		}
		listed := map[string]bool{}
		for _, n := range names {
			listed[n] = true
			if _, ok := w.known[n]; !ok || p.all || first {
				toRead[n] = true
			}
		}
		for n := range w.known {
			if !listed[n] {
				gone[n] = true
				delete(toRead, n)
			}
		}
	}
	names := slices.Sorted(maps.Keys(toRead))
	reads := make([]nodeScan, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, scanFetches)
	var wg sync.WaitGroup
	for i, name := range names {
		armed := w.dataArmed[name]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			n := nodeScan{name: name, path: path.Join(w.dir, name)}
			if armed {
				n.data, n.stat, n.readErr = conn.Get(w.reg.full(n.path))
			} else {
				n.data, n.stat, _, n.readErr = conn.GetW(w.reg.full(n.path))
			}
			if n.readErr != nil && !errors.Is(n.readErr, zk.ErrNoNode) && !nodeError(n.readErr) {
				errs[i] = n.readErr
			}
			reads[i] = n
		}()
	}
	wg.Wait()
	for i, n := range reads {
		// A watch was armed by every read that returned a node or a node
		// error other than a missing node.
		if errs[i] == nil && !errors.Is(n.readErr, zk.ErrNoNode) && n.readErr == nil {
			w.dataArmed[n.name] = true
		}
	}
	if err := firstErr(errs); err != nil {
		return nil, err
	}

	now := time.Now().UTC()
	var evs []watchEvent
	for _, name := range slices.Sorted(maps.Keys(gone)) {
		evs = append(evs, w.event(now, evRemoved, name, w.known[name], ""))
		delete(w.known, name)
		delete(w.dataArmed, name)
	}
	for _, n := range reads {
		if errors.Is(n.readErr, zk.ErrNoNode) {
			if old, ok := w.known[n.name]; ok {
				evs = append(evs, w.event(now, evRemoved, n.name, old, ""))
				delete(w.known, n.name)
			}
			delete(w.dataArmed, n.name)
			continue
		}
		if n.readErr == nil {
			n.inst, n.decErr = w.reg.codec.Decode(w.service, n.name, n.data)
		}
		cur := rowOf(n)
		old, had := w.known[n.name]
		w.known[n.name] = cur
		switch {
		case !had && first:
			evs = append(evs, w.event(now, evPresent, n.name, cur, ""))
		case !had:
			evs = append(evs, w.event(now, evAdded, n.name, cur, ""))
		case old.czxid != cur.czxid && cur.czxid != 0:
			evs = append(evs, w.event(now, evRecreated, n.name, cur, ""))
		case old.status != cur.status:
			evs = append(evs, w.event(now, evStatus, n.name, cur, old.status))
		case old.address != cur.address || old.port != cur.port || old.sslPort != cur.sslPort ||
			!maps.Equal(old.metadata, cur.metadata) || old.err != cur.err:
			evs = append(evs, w.event(now, evChanged, n.name, cur, ""))
		}
	}
	return evs, nil
}

// list lists the service's children, re-arming the children watch, or an
// exists watch while the service node is missing (Curator's container
// parents come and go with their instances).
func (w *watcher) list() ([]string, error) {
	conn := w.reg.conn
	for {
		var names []string
		var err error
		if w.childArmed {
			names, _, err = conn.Children(w.full)
		} else {
			names, _, _, err = conn.ChildrenW(w.full)
			if err == nil {
				w.childArmed = true
			}
		}
		if err == nil {
			return names, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return nil, err
		}
		w.childArmed = false
		if w.existArmed {
			return nil, nil
		}
		ok, _, _, err := conn.ExistsW(w.full)
		if err != nil {
			return nil, err
		}
		w.existArmed = true
		if !ok {
			return nil, nil
		}
		// Created meanwhile: list it.
	}
}

func rowOf(n nodeScan) row {
	r := row{}
	if n.stat != nil {
		r.czxid = n.stat.Czxid
		r.owner = ownerHex(n.stat)
	}
	switch {
	case n.readErr != nil:
		r.status, r.err = statusUnreadable, n.readErr.Error()
	case n.decErr != nil:
		r.status, r.err = statusMalformed, n.decErr.Error()
	default:
		r.status = string(n.inst.Status())
		r.address, r.port, r.sslPort = n.inst.Address, n.inst.Port, n.inst.SSLPort
		r.metadata = n.inst.Metadata
	}
	return r
}

func (w *watcher) event(now time.Time, kind, name string, r row, oldStatus string) watchEvent {
	return watchEvent{
		Time: msTime{now}, Event: kind, Service: w.service, ID: name, Path: path.Join(w.dir, name),
		Address: r.address, Port: r.port, SSLPort: r.sslPort, Status: r.status, OldStatus: oldStatus, DrainedBy: r.metadata[sd.MetadataDrainedBy],
		OutBy: sd.OutOfServiceBy(sd.Instance{Metadata: r.metadata}),
		Owner: r.owner, Error: r.err,
	}
}
