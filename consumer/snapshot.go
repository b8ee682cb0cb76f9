package consumer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-kit/kit/metrics"

	"github.com/gracekit/gracekit/sd"
)

// Snapshot defaults (docs/STATIC-STABILITY.md).
const (
	// DefaultSnapshotStartWait is how long Instancer waits for a service's
	// first load from ZooKeeper before it serves the service's snapshot:
	// long enough for a healthy ensemble (a first load takes milliseconds)
	// and for a connection that tries a dead server first, short enough to
	// fit in fx's default start timeout (15 s) with the rest of a start, and
	// in grpcresolver's DefaultLoadTimeout (5 s). A caller's ctx that ends
	// before it ends the wait without the snapshot.
	DefaultSnapshotStartWait = 3 * time.Second
	// DefaultSnapshotMaxAge is the age past which a snapshot is not served:
	// a day, as Synapse's state_file_ttl.
	DefaultSnapshotMaxAge = 24 * time.Hour
	// SnapshotInterval is how often a service's snapshot is written at
	// most: the newest set of each interval wins.
	SnapshotInterval = time.Second
	// SnapshotRefresh is how often an unchanged live set is written again,
	// so that its read time, and so its age, follows what the consumer
	// knows: a set watched for a week is a minute old, not a week.
	SnapshotRefresh = time.Minute
	// SnapshotVersion is the version of the snapshot format this package
	// writes and the highest it reads.
	SnapshotVersion = 1
	// snapshotFormat names the format in every file.
	snapshotFormat = "gracekit-snapshot"
	// snapshotMaxSize bounds what is read of a file.
	snapshotMaxSize = 256 << 20
	// snapshotFailLogEvery bounds the logging of failed writes.
	snapshotFailLogEvery = time.Minute
)

// SnapshotMetrics are go-kit metrics the snapshot updates, each scoped
// With("service", name); nil ones are skipped.
type SnapshotMetrics struct {
	// Age is the age of the snapshot a service serves, in seconds (now
	// less its read time), and 0 once the service is read from ZooKeeper
	// (gracekit_sd_snapshot_age_seconds).
	Age metrics.Gauge
	// WriteFailures counts snapshot writes that failed: a full or
	// read-only disk, a missing permission
	// (gracekit_sd_snapshot_write_failures_total).
	WriteFailures metrics.Counter
}

// WithSnapshot makes the consumer keep a snapshot of what it publishes in
// dir, one file per service (made 0600, dir 0700 when missing), and serve
// a service from its snapshot when its first load from ZooKeeper does not
// succeed within the start wait (WithSnapshotStartWait) and the snapshot
// is younger than the max age (WithSnapshotMaxAge). See
// docs/STATIC-STABILITY.md.
func WithSnapshot(dir string) Option {
	return optionFunc(func(o *options) error {
		if dir == "" {
			return fmt.Errorf("consumer: empty snapshot directory")
		}
		o.snapshot.dir = dir
		return nil
	})
}

// WithSnapshotStartWait sets how long Instancer waits for a first load
// before it serves the snapshot (default DefaultSnapshotStartWait).
func WithSnapshotStartWait(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("consumer: invalid snapshot start wait %v (must be positive)", d)
		}
		o.snapshot.startWait = d
		return nil
	})
}

// WithSnapshotMaxAge sets the age past which a snapshot is not served
// (default DefaultSnapshotMaxAge).
func WithSnapshotMaxAge(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("consumer: invalid snapshot max age %v (must be positive)", d)
		}
		o.snapshot.maxAge = d
		return nil
	})
}

// WithSnapshotMetrics reports the snapshot's figures through go-kit
// metrics.
func WithSnapshotMetrics(m SnapshotMetrics) Option {
	return optionFunc(func(o *options) error { o.snapshot.metrics = m; return nil })
}

type snapshotOptions struct {
	dir       string // "": no snapshot
	startWait time.Duration
	maxAge    time.Duration
	metrics   SnapshotMetrics
}

// StaleService is a service served from its snapshot.
type StaleService struct {
	Name   string
	ReadAt time.Time // when its set was last known to be ZooKeeper's
}

// StaleError is Live's error: services served from their snapshot.
type StaleError struct {
	Services []StaleService
}

func (e *StaleError) Error() string {
	var b strings.Builder
	b.WriteString("consumer: serving from a snapshot, not read from ZooKeeper yet:")
	for i, s := range e.Services {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %s (read %s ago)", s.Name, time.Since(s.ReadAt).Round(time.Second))
	}
	return b.String()
}

// SnapshotStartWait is how long Instancer waits for a first load before
// it serves the snapshot; 0 without WithSnapshot.
func (c *Consumer) SnapshotStartWait() time.Duration {
	if c.snap == nil {
		return 0
	}
	return c.snap.opts.startWait
}

// Live returns nil when no service is served from its snapshot, else a
// *StaleError naming those that are: what a readiness check that requires
// a live view asks.
func (c *Consumer) Live() error {
	var stale []StaleService
	for name, in := range c.instancers() {
		if readAt, ok := in.Stale(); ok {
			stale = append(stale, StaleService{Name: name, ReadAt: readAt})
		}
	}
	if len(stale) == 0 {
		return nil
	}
	return &StaleError{Services: stale}
}

// instancers are the services' Instancers made so far.
func (c *Consumer) instancers() map[string]*sd.Instancer {
	c.mu.Lock()
	defer c.mu.Unlock()
	ins := make(map[string]*sd.Instancer, len(c.services))
	for name, s := range c.services {
		select {
		case <-s.ready:
			if s.in != nil {
				ins[name] = s.in
			}
		default:
		}
	}
	return ins
}

// snapshotFile is a snapshot on disk, one service's.
type snapshotFile struct {
	Format    string             `json:"format"`
	Version   int                `json:"version"`
	View      snapshotView       `json:"view"`
	Zxid      int64              `json:"zxid"`
	ReadAt    time.Time          `json:"readAt"`
	Instances []snapshotInstance `json:"instances"`
}

type snapshotView struct {
	Servers  []string `json:"servers"`
	Chroot   string   `json:"chroot"`
	BasePath string   `json:"basePath"`
	Service  string   `json:"service"`
	Layout   string   `json:"layout"`
}

type snapshotInstance struct {
	Node             string            `json:"node"`      // the znode's name
	Published        string            `json:"published"` // what was published for it
	ID               string            `json:"id"`
	Address          string            `json:"address"`
	Port             int               `json:"port,omitempty"`
	SSLPort          int               `json:"sslPort,omitempty"`
	Metadata         map[string]string `json:"metadata,omitempty"`
	RegistrationTime time.Time         `json:"registrationTime"`
	ServiceType      string            `json:"serviceType,omitempty"`
	URISpec          string            `json:"uriSpec,omitempty"`
	Czxid            int64             `json:"czxid"`
	Version          int32             `json:"version"`
}

func viewOf(v sd.View) snapshotView {
	return snapshotView{Servers: v.Servers, Chroot: v.Chroot, BasePath: v.BasePath, Service: v.Service, Layout: v.Layout}
}

func (v snapshotView) sd() sd.View {
	return sd.View{Servers: v.Servers, Chroot: v.Chroot, BasePath: v.BasePath, Service: v.Service, Layout: v.Layout}
}

// snapshotName is the file of v's snapshot: the hash of the ensemble,
// chroot and base path, then the service.
func snapshotName(v sd.View) string {
	h := sha256.New()
	for _, s := range v.Servers {
		fmt.Fprintf(h, "server %q\n", s)
	}
	fmt.Fprintf(h, "chroot %q\nbase %q\n", v.Chroot, v.BasePath)
	key := hex.EncodeToString(h.Sum(nil))[:16]
	svc := url.PathEscape(v.Service)
	if len(svc) > 160 {
		sum := sha256.Sum256([]byte(v.Service))
		svc = hex.EncodeToString(sum[:])
	}
	return "gracekit-" + key + "-" + svc + ".snapshot.json"
}

// snapshots keeps the consumer's snapshot: it reads a service's when its
// first load is late, and writes every service's live set, at most once a
// SnapshotInterval, from one goroutine.
type snapshots struct {
	c    *Consumer
	opts snapshotOptions
	log  *slog.Logger

	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	logged   map[string]bool // bad files already logged, by path and reason
	written  map[string]written
	failed   int       // writes failed since the last one logged
	failLog  time.Time // when a failed write was last logged
	stale    map[string]bool
	dirReady bool
}

// written is what was written last of a service.
type written struct {
	publishes int64
	at        time.Time
}

func newSnapshots(c *Consumer, o snapshotOptions) *snapshots {
	if o.startWait == 0 {
		o.startWait = DefaultSnapshotStartWait
	}
	if o.maxAge == 0 {
		o.maxAge = DefaultSnapshotMaxAge
	}
	return &snapshots{
		c: c, opts: o, log: c.log.With("snapshot_dir", o.dir),
		logged: map[string]bool{}, written: map[string]written{}, stale: map[string]bool{},
	}
}

// start runs the writer until halt.
func (s *snapshots) start() {
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.run()
}

// halt stops the writer, waits for it, then writes what changed since its
// last round. It may be called twice, and without start.
func (s *snapshots) halt() {
	if s.stop == nil {
		return
	}
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.round(time.Now(), true)
}

func (s *snapshots) run() {
	defer close(s.done)
	t := time.NewTicker(SnapshotInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.round(now, false)
		}
	}
}

// round writes each live service whose set changed since it was written,
// or was written SnapshotRefresh ago, and follows the stale ones.
func (s *snapshots) round(now time.Time, final bool) {
	for name, in := range s.c.instancers() {
		s.follow(name, in, now)
		pubs := in.Stats().Publishes
		s.mu.Lock()
		w, ok := s.written[name]
		s.mu.Unlock()
		if ok && w.publishes == pubs && now.Sub(w.at) < SnapshotRefresh {
			continue
		}
		set, live := in.LiveSet()
		if !live {
			continue
		}
		if final && ok && w.publishes == pubs {
			continue // unchanged: the last write says it all
		}
		if err := s.write(set, in); err != nil {
			s.writeFailed(name, err)
			continue
		}
		s.mu.Lock()
		s.written[name] = written{publishes: pubs, at: set.ReadAt}
		s.mu.Unlock()
	}
}

// follow updates the age gauge of a service and logs its first live read
// after a stale start.
func (s *snapshots) follow(name string, in *sd.Instancer, now time.Time) {
	readAt, stale := in.Stale()
	s.mu.Lock()
	was, seen := s.stale[name]
	s.stale[name] = stale
	s.mu.Unlock()
	if was && !stale {
		s.log.Info("the first read from ZooKeeper replaced the snapshot's set", "service", name, "instances", len(in.Instances()))
	}
	if g := s.opts.metrics.Age; g != nil && (stale || !seen || was) {
		age := 0.0
		if stale {
			age = max(now.Sub(readAt), 0).Seconds()
		}
		g.With("service", name).Set(age)
	}
}

// served notes that a service starts from its snapshot: the age gauge is
// set at once.
func (s *snapshots) served(name string, readAt time.Time) {
	s.mu.Lock()
	s.stale[name] = true
	s.mu.Unlock()
	if g := s.opts.metrics.Age; g != nil {
		g.With("service", name).Set(max(time.Since(readAt), 0).Seconds())
	}
}

func (s *snapshots) writeFailed(name string, err error) {
	if c := s.opts.metrics.WriteFailures; c != nil {
		c.With("service", name).Add(1)
	}
	s.mu.Lock()
	s.failed++
	now := time.Now()
	if !s.failLog.IsZero() && now.Sub(s.failLog) < snapshotFailLogEvery {
		s.mu.Unlock()
		return
	}
	n := s.failed
	s.failed, s.failLog = 0, now
	s.mu.Unlock()
	s.log.Warn("writing the snapshot failed; the consumer goes on without it", "service", name, "err", err,
		"failures", n, "next_log_in", snapshotFailLogEvery)
}

// write writes set's file atomically: a temporary file in the same
// directory, synced, renamed over the old one, and the directory synced.
func (s *snapshots) write(set sd.PublishedSet, in *sd.Instancer) error {
	f := snapshotFile{Format: snapshotFormat, Version: SnapshotVersion, View: viewOf(set.View), Zxid: set.Zxid, ReadAt: set.ReadAt.UTC()}
	f.Instances = make([]snapshotInstance, len(set.Instances))
	for i, inst := range set.Instances {
		f.Instances[i] = snapshotInstance{
			Node: filepath.Base(inst.Path), ID: inst.ID, Address: inst.Address, Port: inst.Port, SSLPort: inst.SSLPort,
			Metadata: inst.Metadata, RegistrationTime: inst.RegistrationTime.UTC(), ServiceType: inst.ServiceType,
			URISpec: inst.URISpec, Czxid: inst.Czxid, Version: inst.Version, Published: in.Published(inst),
		}
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := s.ensureDir(); err != nil {
		return err
	}
	name := filepath.Join(s.opts.dir, snapshotName(set.View))
	tmp, err := os.CreateTemp(s.opts.dir, ".gracekit-snapshot-*.tmp") // 0600
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if d, err := os.Open(s.opts.dir); err == nil {
		_ = d.Sync() // the rename, on file systems that need it
		_ = d.Close()
	}
	return nil
}

func (s *snapshots) ensureDir() error {
	s.mu.Lock()
	ready := s.dirReady
	s.mu.Unlock()
	if ready {
		return nil
	}
	if err := os.MkdirAll(s.opts.dir, 0o700); err != nil {
		return err
	}
	s.mu.Lock()
	s.dirReady = true
	s.mu.Unlock()
	return nil
}

// A snapshotError says why a snapshot file is not served; kind is the
// reason without its figures (the log says each kind once).
type snapshotError struct{ kind, reason string }

func (e *snapshotError) Error() string { return e.reason }

func badSnapshot(format string, args ...any) error {
	return &snapshotError{format, fmt.Sprintf(format, args...)}
}

// load is the sd.Fallback's Load: the set of v's snapshot, when there is
// a good one younger than the max age. A bad one is logged once, with its
// path and why, and not served.
func (s *snapshots) load(v sd.View) (sd.PublishedSet, bool) {
	p := filepath.Join(s.opts.dir, snapshotName(v))
	set, err := s.read(p, v, time.Now())
	if err == nil {
		return set, true
	}
	key := p + "\x00" + err.Error()
	var bad *snapshotError
	if errors.As(err, &bad) {
		key = p + "\x00" + bad.kind
	}
	s.mu.Lock()
	seen := s.logged[key]
	s.logged[key] = true
	s.mu.Unlock()
	switch {
	case seen:
	case errors.Is(err, fs.ErrNotExist):
		s.log.Info("no snapshot of the service; waiting for ZooKeeper", "service", v.Service, "path", p)
	default:
		if bad != nil {
			s.log.Warn("ignoring the snapshot", "service", v.Service, "path", p, "reason", err.Error())
		} else {
			s.log.Warn("ignoring the snapshot: it cannot be read", "service", v.Service, "path", p, "reason", err.Error())
		}
	}
	return sd.PublishedSet{}, false
}

// read reads and checks the snapshot at p for v.
func (s *snapshots) read(p string, v sd.View, now time.Time) (sd.PublishedSet, error) {
	f, err := os.Open(p)
	if err != nil {
		return sd.PublishedSet{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, snapshotMaxSize+1))
	if err != nil {
		return sd.PublishedSet{}, err
	}
	if len(data) > snapshotMaxSize {
		return sd.PublishedSet{}, badSnapshot("larger than %d bytes", snapshotMaxSize)
	}
	var head struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return sd.PublishedSet{}, badSnapshot("not a snapshot (corrupt or truncated JSON): %v", err)
	}
	switch {
	case head.Format != snapshotFormat:
		return sd.PublishedSet{}, badSnapshot("foreign format %q, want %q", head.Format, snapshotFormat)
	case head.Version > SnapshotVersion:
		return sd.PublishedSet{}, badSnapshot("format version %d is newer than this consumer's %d", head.Version, SnapshotVersion)
	case head.Version < 1:
		return sd.PublishedSet{}, badSnapshot("invalid format version %d", head.Version)
	}
	var sf snapshotFile // unknown fields are ignored, as in the nodes
	if err := json.Unmarshal(data, &sf); err != nil {
		return sd.PublishedSet{}, badSnapshot("corrupt: %v", err)
	}
	if got := sf.View.sd(); !got.Equal(v) {
		if got.Layout != v.Layout && got.Service == v.Service && got.BasePath == v.BasePath && got.Chroot == v.Chroot {
			return sd.PublishedSet{}, badSnapshot("read in layout %s; this consumer reads %s", got.Layout, v.Layout)
		}
		return sd.PublishedSet{}, badSnapshot("of another view (servers %v, chroot %q, base path %q, service %q), not this consumer's (servers %v, chroot %q, base path %q, service %q)",
			got.Servers, got.Chroot, got.BasePath, got.Service, v.Servers, v.Chroot, v.BasePath, v.Service)
	}
	switch age := now.Sub(sf.ReadAt); {
	case sf.ReadAt.IsZero():
		return sd.PublishedSet{}, badSnapshot("no read time")
	case age < -time.Minute:
		return sd.PublishedSet{}, badSnapshot("read time %s is in the future", sf.ReadAt.Format(time.RFC3339))
	case age > s.opts.maxAge:
		return sd.PublishedSet{}, badSnapshot("read %s ago, older than the max age %s", age.Round(time.Second), s.opts.maxAge)
	}
	set := sd.PublishedSet{View: v, Zxid: sf.Zxid, ReadAt: sf.ReadAt, Instances: make([]sd.Instance, len(sf.Instances))}
	dir := v.BasePath + "/" + v.Service
	nodes := make(map[string]bool, len(sf.Instances))
	for i, si := range sf.Instances {
		if !sd.ValidNodeName(si.Node) || nodes[si.Node] {
			return sd.PublishedSet{}, badSnapshot("corrupt: instance %d has an invalid or repeated node name %q", i, si.Node)
		}
		if !sd.ValidHost(si.Address) || si.Port < 0 || si.Port > 65535 || si.SSLPort < 0 || si.SSLPort > 65535 || si.Port+si.SSLPort == 0 {
			return sd.PublishedSet{}, badSnapshot("corrupt: instance %q has an invalid address %q or ports %d, %d", si.Node, si.Address, si.Port, si.SSLPort)
		}
		nodes[si.Node] = true
		set.Instances[i] = sd.Instance{
			Name: v.Service, ID: si.ID, Address: si.Address, Port: si.Port, SSLPort: si.SSLPort, Metadata: si.Metadata,
			RegistrationTime: si.RegistrationTime, ServiceType: si.ServiceType, URISpec: si.URISpec,
			Path: dir + "/" + si.Node, Czxid: si.Czxid, Version: si.Version,
		}
	}
	return set, nil
}
