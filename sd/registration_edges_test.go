package sd_test

import (
	"context"
	"errors"
	"path"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// Issue 40's registration edges. Each test uses a server of its own: they
// fault connections, set ACLs on the root's children or count on the
// default base path.

// adminConn is a session authenticated as the digest user admin, the
// operator who prepares the parents.
func adminConn(t *testing.T, c *zktest.Cluster) *zk.Conn {
	t.Helper()
	conn, _, err := zk.Connect(c.Addrs(), 5*time.Second, zk.WithLogInfo(false), zk.WithLogger(testutil.Silent{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if err := conn.AddAuth("digest", []byte("admin:admin-secret")); err != nil {
		t.Fatal(err)
	}
	return conn
}

// Issue 40: ZooKeeper checks CREATE on the parent before it answers
// NODEEXISTS, so a registration that created every level of its path and
// counted on NODEEXISTS failed with "sd: create /services/billing: zk:
// not authenticated" in the layout docs/SECURITY.md recommends: the
// parent above the service's node (or above a chroot) lets the service's
// digest user read it only. Path creation reads each level first.
func TestRegisterUnderAParentThatDeniesCreate(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	admin := adminConn(t, c)
	adminOnly := append(zk.WorldACL(zk.PermRead), zk.DigestACL(zk.PermAll, "admin", "admin-secret")...)
	billingAll := append(zk.WorldACL(zk.PermRead), zk.DigestACL(zk.PermAll, "billing", "billing-secret")...)
	tests := []struct {
		name    string
		chroot  string   // appended to the connect string
		readsOf []string // made by admin, world READ only
		owns    string   // made by admin for the billing user
	}{
		{name: "a service node an operator prepared", readsOf: []string{"/services"}, owns: "/services/billing"},
		{name: "a chroot whose parent is read-only", chroot: "/apps/prod", readsOf: []string{"/apps"}, owns: "/apps/prod"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, p := range tt.readsOf {
				if _, err := admin.Create(p, nil, 0, adminOnly); err != nil {
					t.Fatalf("create %s: %v", p, err)
				}
			}
			if _, err := admin.Create(tt.owns, nil, 0, billingAll); err != nil {
				t.Fatalf("create %s: %v", tt.owns, err)
			}
			cl, err := sd.NewClient(c.ConnectString()+tt.chroot, sd.SessionTimeout(2*time.Second), sd.DigestAuth("billing", "billing-secret"))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			r, err := sd.NewRegistrar(cl, instance("billing", 8700+i))
			if err != nil {
				t.Fatal(err)
			}
			if err := r.RegisterContext(ctxFor(t)); err != nil {
				t.Fatalf("RegisterContext under %s, which lets billing only read it: %v", tt.readsOf[0], err)
			}
			if _, stat, err := admin.Get(tt.chroot + r.Path()); err != nil || stat.EphemeralOwner != cl.SessionID() {
				t.Fatalf("node after the registration: %v, %+v; want it held by the client's session", err, stat)
			}
			if err := r.DeregisterContext(ctxFor(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Issue 40: the parents' creates went around the Registrar's reply limit
// and its caller's ctx, so a create whose reply never came held
// RegisterContext (and, from the keeper, a DeregisterContext waiting for
// it) for as long as the connection lived. Both now give up the request
// after the reply limit, read again and carry on.
func TestALostReplyToAParentCreateHoldsNeitherRegisterNorDeregister(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	look := testutil.ZKConn(t, c.Addrs())
	const createContainer = 19
	// returns runs f in a goroutine and fails the test unless it returns
	// within a bound longer than the ctx f is given.
	returns := func(t *testing.T, what string, f func(ctx context.Context) error) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit/2)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- f(ctx) }()
		select {
		case err := <-done:
			return err
		case <-time.After(waitLimit):
			t.Fatalf("%s did not return within its ctx (%v) with a parent create's reply lost", what, waitLimit/2)
			return nil
		}
	}

	t.Run("register", func(t *testing.T) {
		base := zktest.UniquePath(t)
		dial := &dropReply{op: createContainer}
		cl := newClient(t, c, sd.Dialer(dial.Dial))
		r, err := sd.NewRegistrar(cl, instance("lostparent", 8711), sd.BasePath(base))
		if err != nil {
			t.Fatal(err)
		}
		if err := returns(t, "RegisterContext", r.RegisterContext); err != nil {
			t.Fatalf("RegisterContext with a parent create's reply lost: %v", err)
		}
		if dial.dropped.Load() != 1 {
			t.Fatal("no reply was dropped")
		}
		if _, stat, err := look.Get(r.Path()); err != nil || stat.EphemeralOwner != cl.SessionID() {
			t.Fatalf("node after the registration: %v, %+v; want it held by the client's session", err, stat)
		}
		if err := returns(t, "DeregisterContext", r.DeregisterContext); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("deregister while the keeper makes the parents again", func(t *testing.T) {
		base := zktest.UniquePath(t)
		dial := &dropReply{op: createContainer}
		dial.dropped.Store(1) // the registration's own creates pass
		cl := newClient(t, c, sd.Dialer(dial.Dial))
		inst := instance("lostparent", 8712)
		r, err := sd.NewRegistrar(cl, inst, sd.BasePath(base))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.RegisterContext(ctxFor(t)); err != nil {
			t.Fatal(err)
		}
		// SetStatus returns once the keeper reconciled, so its watch is armed.
		if err := r.SetStatus(ctxFor(t), sd.StatusUp); err != nil {
			t.Fatal(err)
		}
		dial.dropped.Store(0) // the next parent create's reply is lost
		// The node and its parents go at once (a reaper, an operator): the
		// keeper makes the parents again.
		svc := path.Join(base, inst.Name)
		if _, err := look.Multi(&zk.DeleteRequest{Path: r.Path(), Version: -1},
			&zk.DeleteRequest{Path: svc, Version: -1}, &zk.DeleteRequest{Path: base, Version: -1}); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "the keeper's parent create to lose its reply", func() bool { return dial.dropped.Load() == 1 })
		if err := returns(t, "DeregisterContext", r.DeregisterContext); err != nil {
			t.Fatalf("DeregisterContext with the keeper's parent create unanswered: %v", err)
		}
		if ok, _, err := look.Exists(r.Path()); err != nil || ok {
			t.Fatalf("node after DeregisterContext: exists %v, %v", ok, err)
		}
	})
}

// Issue 40: SetStatus after the Client's Close waited its whole ctx
// (for ever with context.Background) and said "the Registrar keeps
// trying", though nothing was left to try.
func TestSetStatusAfterTheClientClosedReturnsErrClosed(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	cl := newClient(t, c)
	r := register(t, cl, instance("closedstatus", 8721))
	cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.SetStatus(ctx, sd.StatusOutOfService); !errors.Is(err, sd.ErrClosed) {
		t.Fatalf("SetStatus after Client.Close: %v; want sd.ErrClosed", err)
	}
}

// Issue 40: a persistent node at the instance's path (an operator's, a
// foreign writer's: ephemeralOwner 0) was waited for until ctx ended, as
// if a live session held it, and reported as "held by another live
// session 0x0". No session's end removes it: it is refused at once.
func TestRegisterRefusesAPersistentNodeAtItsPath(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	look := testutil.ZKConn(t, c.Addrs())
	cl := newClient(t, c)
	inst := instance("persistent", 8731)
	r, err := sd.NewRegistrar(cl, inst)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/services", "/services/" + inst.Name, r.Path()} {
		if _, err := look.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("create %s: %v", p, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = r.RegisterContext(ctx)
	var conflict *sd.ConflictError
	if !errors.Is(err, sd.ErrPersistentNode) || errors.As(err, &conflict) || ctx.Err() != nil {
		t.Fatalf("RegisterContext with a persistent node at its path: %v (ctx: %v); want sd.ErrPersistentNode at once", err, ctx.Err())
	}
	t.Log(err)
	if _, stat, err := look.Get(r.Path()); err != nil || stat.EphemeralOwner != 0 {
		t.Fatalf("the persistent node after the refusal: %v, %+v; want it left as it is", err, stat)
	}
}

// Issue 40: a drained node made undecodable (a hand edit, a foreign
// writer) was rewritten whole as UP without the drain marks, though the
// Registrar still knew the drain. The rewrite keeps it.
func TestAnUndecodableDrainedNodeIsRewrittenDrained(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	look := testutil.ZKConn(t, c.Addrs())
	cl := newClient(t, c)
	inst := instance("undecodable", 8741)
	r := register(t, cl, inst)
	data, stat, err := look.Get(r.Path())
	if err != nil {
		t.Fatal(err)
	}
	drained, err := sd.Drain(sd.CuratorCodec{}, inst.Name, path.Base(r.Path()), data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := look.Set(r.Path(), drained, stat.Version); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the Registrar to see the drain", func() bool { return r.DrainedBy() == sd.DrainedByOperator })
	if _, err := look.Set(r.Path(), []byte("{a hand edit"), -1); err != nil {
		t.Fatal(err)
	}
	var got sd.Instance
	testutil.WaitFor(t, "the Registrar to rewrite its undecodable node", func() bool {
		data, _, err := look.Get(r.Path())
		if err != nil {
			return false
		}
		got, err = sd.CuratorCodec{}.Decode(inst.Name, path.Base(r.Path()), data)
		return err == nil
	})
	if got.Status() != sd.StatusOutOfService || got.Metadata[sd.MetadataDrainedBy] != sd.DrainedByOperator ||
		got.Metadata[sd.MetadataDrainedStatus] != string(sd.StatusUp) {
		t.Fatalf("rewritten node: status %s, metadata %v; want OUT_OF_SERVICE, drained by %s, drained status UP",
			got.Status(), got.Metadata, sd.DrainedByOperator)
	}
}

// Issue 40: registrationTimeUTC was stamped by NewRegistrar, before the
// provider's ReadyCheck ran, so a consumer ramped a slow starter from
// past the start of its slow-start window, or not at all. It is the time
// of the Registrar's first create, kept when the node is made again
// within the Registrar's life: slow start ramps a process, not a session.
func TestRegistrationTimeIsTheFirstCreates(t *testing.T) {
	t.Parallel()
	c := zktest.New(t)
	look := testutil.ZKConn(t, c.Addrs())
	cl := newClient(t, c)
	inst := instance("regtime", 8751)
	r, err := sd.NewRegistrar(cl, inst)
	if err != nil {
		t.Fatal(err)
	}
	// The provider's ReadyCheck runs here; registrationTimeUTC counts
	// milliseconds, so a few of them pass.
	waitPastMillis(time.Now())
	called := time.Now()
	if err := r.RegisterContext(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	defer r.Deregister()
	nodeTime := func() (time.Time, int64) {
		t.Helper()
		data, stat, err := look.Get(r.Path())
		if err != nil {
			t.Fatal(err)
		}
		got, err := sd.CuratorCodec{}.Decode(inst.Name, path.Base(r.Path()), data)
		if err != nil {
			t.Fatal(err)
		}
		return got.RegistrationTime, stat.Czxid
	}
	first, czxid := nodeTime()
	if first.UnixMilli() < called.UnixMilli() {
		t.Fatalf("registrationTimeUTC %d is before the RegisterContext call at %d", first.UnixMilli(), called.UnixMilli())
	}
	if got := r.Instance().RegistrationTime; !got.Equal(first) {
		t.Fatalf("Instance().RegistrationTime %v, node's %v", got, first)
	}
	// The keeper makes the node again (a session expiry, an operator's
	// delete): the registration time stays the first create's.
	waitPastMillis(time.Now())
	if err := look.Delete(r.Path(), -1); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the keeper to make the node again", func() bool {
		_, stat, err := look.Get(r.Path())
		return err == nil && stat.Czxid != czxid
	})
	if again, _ := nodeTime(); !again.Equal(first) {
		t.Fatalf("registrationTimeUTC after the re-create %d, want the first create's %d", again.UnixMilli(), first.UnixMilli())
	}
}

// waitPastMillis returns once the clock is a few milliseconds past t.
func waitPastMillis(t time.Time) {
	for time.Now().UnixMilli() < t.UnixMilli()+5 {
		time.Sleep(time.Millisecond)
	}
}
