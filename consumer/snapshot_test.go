package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/kit/metrics"
	kitsd "github.com/go-kit/kit/sd"
	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// logRecords is a slog.Handler that keeps every record.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecords) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *logRecords) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecords) WithGroup(string) slog.Handler      { return r }

// matching returns the records at level or above whose message contains
// msg, each as its message followed by its attributes (key=value).
func (r *logRecords) matching(level slog.Level, msg string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs {
		if rec.Level < level || !strings.Contains(rec.Message, msg) {
			continue
		}
		var b strings.Builder
		b.WriteString(rec.Message)
		rec.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.Key + "=" + a.Value.String())
			return true
		})
		out = append(out, b.String())
	}
	return out
}

// figure is a go-kit Gauge and Counter that keeps its last value, and the
// labels it was scoped with.
type figure struct {
	mu     sync.Mutex
	v      float64
	labels []string
}

func (f *figure) With(lv ...string) metrics.Counter { f.scope(lv); return f }
func (f *figure) Add(d float64)                     { f.mu.Lock(); f.v += d; f.mu.Unlock() }
func (f *figure) Set(v float64)                     { f.mu.Lock(); f.v = v; f.mu.Unlock() }
func (f *figure) Value() float64                    { f.mu.Lock(); defer f.mu.Unlock(); return f.v }
func (f *figure) scope(lv []string)                 { f.mu.Lock(); f.labels = lv; f.mu.Unlock() }
func (f *figure) scoped() []string                  { f.mu.Lock(); defer f.mu.Unlock(); return f.labels }

// gauge is f as a metrics.Gauge.
type gauge struct{ *figure }

func (g gauge) With(lv ...string) metrics.Gauge { g.scope(lv); return g }

// putInstance writes a persistent Curator node for inst under base, with
// its parents, and returns its creation zxid.
func putInstance(t *testing.T, z testutil.ZK, base string, inst sd.Instance) int64 {
	t.Helper()
	dir := base + "/" + inst.Name
	for i := 1; i <= len(dir); i++ {
		if i == len(dir) || dir[i] == '/' {
			if _, err := z.Create(dir[:i], nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				t.Fatal(err)
			}
		}
	}
	data, err := sd.CuratorCodec{}.Encode(inst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := z.Create(dir+"/"+inst.ID, data, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	_, st, err := z.Get(dir + "/" + inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	return st.Czxid
}

func quote(id string, port int) sd.Instance {
	return sd.Instance{Name: "quote", ID: id, Address: "127.0.0.1", Port: port, RegistrationTime: time.Now().Add(-time.Hour)}
}

// snapConsumer is a started consumer with a snapshot in dir, stopped when
// the test ends.
func snapConsumer(t *testing.T, connect string, sopts []sd.ClientOption, opts ...consumer.Option) *consumer.Consumer {
	t.Helper()
	sess, err := sd.NewSession(connect, sopts...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(sess, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// writeSnapshot has a consumer over zkc (ZooKeeper up) load service quote
// and waits until its snapshot in dir holds want, then stops it. It
// returns the file's path.
func writeSnapshot(t *testing.T, zkc *zktest.Cluster, dir string, want []string, opts ...consumer.Option) string {
	t.Helper()
	c := snapConsumer(t, zkc.ConnectString(), nil, append([]consumer.Option{consumer.WithSnapshot(dir)}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Instancer(ctx, "quote"); err != nil {
		t.Fatal(err)
	}
	var file string
	testutil.WaitFor(t, "the snapshot to hold "+strings.Join(want, ","), func() bool {
		for _, p := range snapshotFiles(t, dir) {
			if got := snapshotPublished(t, p); slices.Equal(got, want) {
				file = p
				return true
			}
		}
		return false
	})
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	return file
}

func snapshotFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "gracekit-*.snapshot.json"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// snapshotPublished is what the snapshot at p says was published.
func snapshotPublished(t *testing.T, p string) []string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		return nil
	}
	var f struct {
		Instances []struct{ Published string }
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil
	}
	var out []string
	for _, i := range f.Instances {
		out = append(out, i.Published)
	}
	return out
}

// published waits for the first event registered on in and returns it.
func firstEvent(t *testing.T, in *sd.Instancer) kitsd.Event {
	t.Helper()
	ch := make(chan kitsd.Event, 1)
	in.Register(ch)
	defer in.Deregister(ch)
	select {
	case ev := <-ch:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	return kitsd.Event{}
}

// Issue 42: a consumer that starts while every ZooKeeper server is down
// serves the set an earlier consumer published, within the start wait:
// its events carry the set without an error, the Instancer says it is
// stale and since when, Live names the service, the age gauge is set, and
// one line says so. The file was written 0600, with its format and
// version.
func TestSnapshotServesTheLastSetWhenZooKeeperIsDownAtStart(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t) // of its own: the test stops it
	z := testutil.ZKConn(t, zkc.Addrs())
	czA := putInstance(t, z, "/services", quote("a", 9001))
	putInstance(t, z, "/services", quote("b", 9002))
	dir := t.TempDir()
	file := writeSnapshot(t, zkc, dir, []string{"127.0.0.1:9001", "127.0.0.1:9002"})
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("the snapshot's mode: %v, want 0600", st.Mode().Perm())
	}
	var head struct {
		Format  string
		Version int
		Zxid    int64
	}
	data, _ := os.ReadFile(file)
	if err := json.Unmarshal(data, &head); err != nil || head.Format != "gracekit-snapshot" || head.Version != consumer.SnapshotVersion || head.Zxid < czA {
		t.Fatalf("the snapshot's head: %+v (%v), want format gracekit-snapshot, version %d, a zxid at least %#x", head, err, consumer.SnapshotVersion, czA)
	}
	if err := zkc.StopAll(); err != nil {
		t.Fatal(err)
	}

	rec := &logRecords{}
	age := &figure{}
	const wait = time.Second
	c := snapConsumer(t, zkc.ConnectString(), nil, consumer.WithLogger(slog.New(rec)),
		consumer.WithSnapshot(dir), consumer.WithSnapshotStartWait(wait), consumer.WithSnapshotMetrics(consumer.SnapshotMetrics{Age: gauge{age}}))
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	in, err := c.Instancer(ctx, "quote")
	if err != nil {
		t.Fatalf("a consumer started with ZooKeeper down, a snapshot at hand: %v", err)
	}
	if took := time.Since(begin); took < wait || took > wait+3*time.Second {
		t.Fatalf("Instancer returned after %v, want the start wait (%v) and little more", took, wait)
	}
	ev := firstEvent(t, in)
	if ev.Err != nil || !slices.Equal(ev.Instances, []string{"127.0.0.1:9001", "127.0.0.1:9002"}) {
		t.Fatalf("the first event: %+v, want the snapshot's two instances without an error", ev)
	}
	readAt, stale := in.Stale()
	if !stale || time.Since(readAt) > time.Minute {
		t.Fatalf("Stale: %v %v, want stale, read within the last minute", readAt, stale)
	}
	insts := in.Instances()
	if len(insts) != 2 || insts[0].ID != "a" || insts[0].Czxid != czA || insts[0].RegistrationTime.IsZero() {
		t.Fatalf("the snapshot's records: %+v, want a (czxid %#x) and b with their registration times", insts, czA)
	}
	if id, cz, ok := in.Registration("127.0.0.1:9001"); !ok || id != "a" || cz != czA {
		t.Fatalf("Registration: %q %#x %v, want a %#x", id, cz, ok, czA)
	}
	var se *consumer.StaleError
	if err := c.Live(); !errors.As(err, &se) || len(se.Services) != 1 || se.Services[0].Name != "quote" {
		t.Fatalf("Live: %v, want a *StaleError naming quote", err)
	}
	if labels := age.scoped(); age.Value() <= 0 || age.Value() > 60 || !slices.Equal(labels, []string{"service", "quote"}) {
		t.Fatalf("the age gauge: %v %v, want the snapshot's age in seconds, for service quote", age.Value(), labels)
	}
	if lines := rec.matching(slog.LevelWarn, "serving the service's snapshot"); len(lines) != 1 {
		t.Fatalf("log lines about the snapshot: %q, want one", lines)
	}
}

// Issue 42: the first read from ZooKeeper replaces the snapshot's set at
// once: an instance deleted during the outage leaves, one created during
// it joins, and an eviction received while serving the snapshot holds as
// on a live set (the registration evicted stays out). The snapshot is not
// written while stale, then is written with the live set. Both watch
// modes.
func TestSnapshotTheFirstLiveReadReplacesIt(t *testing.T) {
	t.Parallel()
	for _, mode := range []sd.WatchMode{sd.WatchRecursive, sd.WatchPerNode} {
		t.Run("watching "+mode.String(), func(t *testing.T) {
			t.Parallel()
			firstLiveReadReplacesTheSnapshot(t, mode)
		})
	}
}

func firstLiveReadReplacesTheSnapshot(t *testing.T, mode sd.WatchMode) {
	zkc := zktest.New(t) // of its own: the test stops it
	z := testutil.ZKConn(t, zkc.Addrs())
	czA := putInstance(t, z, "/services", quote("a", 9001))
	putInstance(t, z, "/services", quote("b", 9002))
	putInstance(t, z, "/services", quote("e", 9005))
	dir := t.TempDir()
	file := writeSnapshot(t, zkc, dir, []string{"127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9005"})
	// While no consumer watches: b goes, c comes.
	if err := z.Delete("/services/quote/b", -1); err != nil {
		t.Fatal(err)
	}
	putInstance(t, z, "/services", quote("c", 9003))
	if err := zkc.StopAll(); err != nil {
		t.Fatal(err)
	}

	rec := &logRecords{}
	c := snapConsumer(t, zkc.ConnectString(), nil, consumer.WithLogger(slog.New(rec)), consumer.WithInstancerOptions(sd.WithWatchMode(mode)),
		consumer.WithSnapshot(dir), consumer.WithSnapshotStartWait(500*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	in, err := c.Instancer(ctx, "quote")
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan kitsd.Event, 1)
	in.Register(events)
	defer in.Deregister(events)
	if _, res := in.EvictRegistration("a", czA); res != sd.Evicted {
		t.Fatalf("evicting a from the snapshot's set: %v, want evicted", res)
	}
	if got := publishedNow(in); !slices.Equal(got, []string{"127.0.0.1:9002", "127.0.0.1:9005"}) {
		t.Fatalf("after the eviction: %v", got)
	}
	time.Sleep(2 * consumer.SnapshotInterval) // a round that must not write the stale set
	if got := snapshotPublished(t, file); len(got) != 3 {
		t.Fatalf("the snapshot while stale: %v, want the one written before", got)
	}

	if err := zkc.StartAll(); err != nil {
		t.Fatal(err)
	}
	want := []string{"127.0.0.1:9003", "127.0.0.1:9005"} // b deleted, c created, a still evicted
	deadline := time.After(60 * time.Second)
	for {
		var ev kitsd.Event
		select {
		case ev = <-events:
		case <-deadline:
			for _, l := range rec.matching(slog.LevelDebug, "") {
				t.Log(l)
			}
			t.Fatalf("no live set %v; published %v (stats %+v)", want, publishedNow(in), in.Stats())
		}
		if ev.Err == nil && slices.Equal(ev.Instances, want) {
			break
		}
	}
	if _, stale := in.Stale(); stale {
		t.Fatal("still stale after the live set was published")
	}
	if err := c.Live(); err != nil {
		t.Fatalf("Live after the first read: %v", err)
	}
	testutil.WaitFor(t, "the live set's snapshot", func() bool {
		return slices.Equal(snapshotPublished(t, file), want)
	})
	testutil.WaitFor(t, "a line saying the live read replaced the snapshot", func() bool {
		return len(rec.matching(slog.LevelInfo, "replaced the snapshot's set")) == 1
	})
}

func publishedNow(in *sd.Instancer) []string {
	var out []string
	for _, i := range in.Instances() {
		out = append(out, in.Published(i))
	}
	return out
}

// Issue 42: a snapshot older than the max age is not served: the first
// load fails as it would without one, and a line says why, with the path.
func TestSnapshotOlderThanMaxAgeIsIgnored(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t) // of its own: the test stops it
	z := testutil.ZKConn(t, zkc.Addrs())
	putInstance(t, z, "/services", quote("a", 9001))
	dir := t.TempDir()
	file := writeSnapshot(t, zkc, dir, []string{"127.0.0.1:9001"})
	if err := zkc.StopAll(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	rec := &logRecords{}
	c := snapConsumer(t, zkc.ConnectString(), []sd.ClientOption{sd.ConnectTimeout(time.Second)}, consumer.WithLogger(slog.New(rec)),
		consumer.WithSnapshot(dir), consumer.WithSnapshotStartWait(200*time.Millisecond), consumer.WithSnapshotMaxAge(10*time.Millisecond))
	for range 2 { // the retry reads the file again, and logs nothing more
		if _, err := c.Instancer(context.Background(), "quote"); !errors.Is(err, zk.ErrNoServer) {
			t.Fatalf("a first load with ZooKeeper down and an old snapshot: %v, want zk.ErrNoServer", err)
		}
	}
	lines := rec.matching(slog.LevelWarn, "ignoring the snapshot")
	if len(lines) != 1 || !strings.Contains(lines[0], file) || !strings.Contains(lines[0], "older than the max age") {
		t.Fatalf("log: %q, want one line with %s and why", lines, file)
	}
}

// Issue 42: a bad snapshot is logged once, with its path and why, and
// ignored: the first load fails as it would without one, and a retry logs
// nothing more.
func TestSnapshotBadFilesAreLoggedAndIgnored(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t) // of its own: the test stops it
	z := testutil.ZKConn(t, zkc.Addrs())
	putInstance(t, z, "/services", quote("a", 9001))
	putInstance(t, z, "/other", quote("x", 9009))
	dir := t.TempDir()
	file := writeSnapshot(t, zkc, dir, []string{"127.0.0.1:9001"})
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The snapshot of the same service under another base path, in a
	// directory of its own: its bytes go under this one's name below.
	otherDir := t.TempDir()
	other, err := os.ReadFile(writeSnapshot(t, zkc, otherDir, []string{"127.0.0.1:9009"},
		consumer.WithInstancerOptions(sd.BasePath("/other"))))
	if err != nil {
		t.Fatal(err)
	}
	if err := zkc.StopAll(); err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name  string
		give  []byte // the file's bytes; nil: a directory in its place
		want  string // in the reason
		level slog.Level
	}{
		{name: "a corrupt file", give: []byte("\x00\x01garbage{"), want: "corrupt or truncated"},
		{name: "a truncated file", give: good[:len(good)/2], want: "corrupt or truncated"},
		{name: "a foreign format", give: []byte(`{"format":"synapse-state","version":1}`), want: "foreign format"},
		{name: "a future version", give: edit(func(m map[string]any) { m["version"] = 2 }), want: "newer than this consumer's"},
		{name: "an unreadable file", give: nil, want: "is a directory"},
		{name: "another base path's snapshot under this one's name", give: other, want: "of another view"},
		{name: "another ensemble's snapshot under this one's name", give: edit(func(m map[string]any) {
			m["view"].(map[string]any)["servers"] = []string{"10.0.0.1:2181"}
		}), want: "of another view"},
		{name: "another layout's snapshot", give: edit(func(m map[string]any) {
			m["view"].(map[string]any)["layout"] = "sd.PlainCodec"
		}), want: "read in layout sd.PlainCodec"},
		{name: "an instance without an address", give: edit(func(m map[string]any) {
			m["instances"].([]any)[0].(map[string]any)["address"] = ""
		}), want: "invalid address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, filepath.Base(file))
			if tt.give == nil {
				if err := os.Mkdir(path, 0o700); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(path, tt.give, 0o600); err != nil {
				t.Fatal(err)
			}
			rec := &logRecords{}
			c := snapConsumer(t, zkc.ConnectString(), []sd.ClientOption{sd.ConnectTimeout(500 * time.Millisecond)},
				consumer.WithLogger(slog.New(rec)), consumer.WithSnapshot(dir), consumer.WithSnapshotStartWait(100*time.Millisecond))
			for range 2 { // the retry reads the file again, and logs nothing more
				if _, err := c.Instancer(context.Background(), "quote"); !errors.Is(err, zk.ErrNoServer) {
					t.Fatalf("a first load with ZooKeeper down and %s: %v, want zk.ErrNoServer", tt.name, err)
				}
			}
			lines := rec.matching(slog.LevelWarn, "ignoring the snapshot")
			if len(lines) != 1 || !strings.Contains(lines[0], "path="+path) || !strings.Contains(lines[0], tt.want) {
				t.Fatalf("log: %q, want one line with path=%s and %q", lines, path, tt.want)
			}
		})
	}
}

// Issue 42: a consumer of another base path never reads this one's
// snapshot: its own file is another, and it waits for ZooKeeper.
func TestSnapshotOfAnotherBasePathIsNotRead(t *testing.T) {
	t.Parallel()
	zkc := zktest.New(t) // of its own: the test stops it
	z := testutil.ZKConn(t, zkc.Addrs())
	putInstance(t, z, "/services", quote("a", 9001))
	dir := t.TempDir()
	writeSnapshot(t, zkc, dir, []string{"127.0.0.1:9001"})
	if err := zkc.StopAll(); err != nil {
		t.Fatal(err)
	}
	rec := &logRecords{}
	c := snapConsumer(t, zkc.ConnectString(), []sd.ClientOption{sd.ConnectTimeout(500 * time.Millisecond)},
		consumer.WithLogger(slog.New(rec)), consumer.WithSnapshot(dir), consumer.WithSnapshotStartWait(100*time.Millisecond),
		consumer.WithInstancerOptions(sd.BasePath("/elsewhere")))
	for range 2 {
		if _, err := c.Instancer(context.Background(), "quote"); !errors.Is(err, zk.ErrNoServer) {
			t.Fatalf("a first load under another base path: %v, want zk.ErrNoServer", err)
		}
	}
	if lines := rec.matching(slog.LevelInfo, "no snapshot of the service"); len(lines) != 1 {
		t.Fatalf("log: %q, want one line saying there is no snapshot", lines)
	}
}

// Issue 42: a snapshot that cannot be written (here its directory is a
// file: a read-only or full disk fails alike) never fails the consumer:
// each failed write is counted, and logged at most once a minute.
func TestSnapshotWriteFailuresAreCountedNotFatal(t *testing.T) {
	t.Parallel()
	zkc, base := sharedZK(t)
	z := testutil.ZKConn(t, zkc.Addrs())
	putInstance(t, z, base, quote("a", 9001))
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rec := &logRecords{}
	failures := &figure{}
	c := snapConsumer(t, zkc.ConnectString(), nil, consumer.WithLogger(slog.New(rec)),
		consumer.WithSnapshot(filepath.Join(notDir, "snap")), consumer.WithSnapshotMetrics(consumer.SnapshotMetrics{WriteFailures: failures}),
		consumer.WithInstancerOptions(sd.BasePath(base)))
	in, err := c.Instancer(context.Background(), "quote")
	if err != nil {
		t.Fatal(err)
	}
	if got := publishedNow(in); !slices.Equal(got, []string{"127.0.0.1:9001"}) {
		t.Fatalf("published %v", got)
	}
	putInstance(t, z, base, quote("b", 9002)) // a change: another write
	testutil.WaitFor(t, "two failed writes", func() bool { return failures.Value() >= 2 })
	if lines := rec.matching(slog.LevelWarn, "writing the snapshot failed"); len(lines) != 1 {
		t.Fatalf("log: %q, want one line within the minute", lines)
	}
	if err := c.Live(); err != nil {
		t.Fatalf("Live: %v", err)
	}
}
