package sd_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	kitsd "github.com/go-kit/kit/sd"
	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// fallbackSet is a set of one instance, a, for the View v.
func fallbackSet(v sd.View) sd.PublishedSet {
	return sd.PublishedSet{View: v, ReadAt: time.Now().Add(-time.Minute), Zxid: 7, Instances: []sd.Instance{{
		Name: v.Service, ID: "a", Address: "127.0.0.1", Port: 9001, Path: "/whatever/a", Czxid: 5, Version: 0,
		RegistrationTime: time.Now().Add(-time.Hour),
	}}}
}

// Issue 42: a fallback published while the service's read fails goes to
// subscribers without the read's error (go-kit's would not use it
// otherwise), Err still says the read failed, and the first successful
// read replaces it.
func TestFallbackIsPublishedWithoutTheReadErrorAndALiveReadReplacesIt(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	owner := testutil.ZKConn(t, c.Addrs())
	if err := owner.AddAuth("digest", []byte("owner:pw")); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Create("/services", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Create("/services/locked", nil, 0, zk.DigestACL(zk.PermAll, "owner", "pw")); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	var loads atomic.Int32
	in, err := sd.NewInstancerFallback(ctx, cl, "locked", sd.Fallback{After: 500 * time.Millisecond, Load: func(v sd.View) (sd.PublishedSet, bool) {
		loads.Add(1)
		return fallbackSet(v), true
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Stop()
	ch := make(chan kitsd.Event, 16)
	in.Register(ch)
	defer in.Deregister(ch)
	ev := <-ch
	if ev.Err != nil || !slices.Equal(ev.Instances, []string{"127.0.0.1:9001"}) {
		t.Fatalf("the first event: %+v, want the fallback's set without an error", ev)
	}
	// The fallback comes After its wait, which may come before the first
	// read failed on a loaded machine (Err was then ErrNotLoaded, once).
	testutil.WaitFor(t, "Err to say the read failed with zk.ErrNoAuth", func() bool { return errors.Is(in.Err(), zk.ErrNoAuth) })
	if _, stale := in.Stale(); !stale {
		t.Fatal("not stale")
	}
	if _, ok := in.LiveSet(); ok {
		t.Fatal("LiveSet handed out the fallback's set")
	}
	if n := loads.Load(); n != 1 {
		t.Fatalf("Load called %d times, want 1", n)
	}

	// The service can be read now: b is all it holds.
	if _, err := owner.SetACL("/services/locked", zk.WorldACL(zk.PermAll), -1); err != nil {
		t.Fatal(err)
	}
	data, err := sd.CuratorCodec{}.Encode(sd.Instance{Name: "locked", ID: "b", Address: "127.0.0.1", Port: 9002})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Create("/services/locked/b", data, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch, "127.0.0.1:9002")
	if _, stale := in.Stale(); stale {
		t.Fatal("stale after the live read")
	}
	set, ok := in.LiveSet()
	if !ok || len(set.Instances) != 1 || set.Instances[0].ID != "b" || set.Zxid == 0 || !set.View.Equal(in.View()) {
		t.Fatalf("LiveSet: %+v %v, want b's, with a zxid, of the Instancer's view", set, ok)
	}
}

// Issue 42: a first load that succeeds within the wait never asks for
// the fallback.
func TestFallbackIsNotLoadedWhenTheFirstLoadSucceeds(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	cl := newClient(t, c)
	register(t, cl, instance("quick", 9100))
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	in, err := sd.NewInstancerFallback(ctx, cl, "quick", sd.Fallback{After: waitLimit, Load: func(sd.View) (sd.PublishedSet, bool) {
		t.Error("Load called after a successful first load")
		return sd.PublishedSet{}, false
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Stop()
	if _, stale := in.Stale(); stale {
		t.Fatal("stale")
	}
	if got := in.Instances(); len(got) != 1 || got[0].ID != "quick-9100" {
		t.Fatalf("instances: %+v", got)
	}
}

// Issue 42: a fallback of another View (another base path here) is not
// published: with no server, the first load fails as without one.
func TestFallbackOfAnotherViewIsNotPublished(t *testing.T) {
	t.Parallel()
	cl, err := sd.NewClient(fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)), sd.ConnectTimeout(500*time.Millisecond)) // nothing listens
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	in, err := sd.NewInstancerFallback(context.Background(), cl, "quote", sd.Fallback{After: 100 * time.Millisecond, Load: func(v sd.View) (sd.PublishedSet, bool) {
		v.BasePath = "/elsewhere"
		return fallbackSet(v), true
	}})
	if err == nil {
		in.Stop()
		t.Fatal("published a fallback of another view")
	}
	if !errors.Is(err, zk.ErrNoServer) {
		t.Fatalf("err: %v, want zk.ErrNoServer", err)
	}
}
