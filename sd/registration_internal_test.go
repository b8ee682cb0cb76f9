package sd

import (
	"testing"
	"time"
)

// storeEntry stores an entry as a read of node name would.
func storeEntry(in *Instancer, name, id, pub string, czxid int64, registered time.Time) {
	e := &entry{ok: true, czxid: czxid, inst: Instance{ID: id, Czxid: czxid, RegistrationTime: registered}}
	e.setPub(pub)
	in.entries[name] = e
}

// A provider restarted on its address while its old node lives on: two
// registrations publish one string. Describe and Registration answer for
// the newest (created last), which an Endpointer ramps.
func TestDescribeAndRegistrationAnswerForTheNewestRegistration(t *testing.T) {
	in := &Instancer{entries: map[string]*entry{}, first: make(chan struct{})}
	old, restarted := time.Now().Add(-time.Hour), time.Now()
	storeEntry(in, "z-old", "z-old", "10.0.0.2:80", 7, old) // sorts after the new one by ID
	storeEntry(in, "a-new", "a-new", "10.0.0.2:80", 9, restarted)
	storeEntry(in, "other", "other", "10.0.0.1:80", 3, old)
	in.mu.Lock()
	in.publishLocked()
	in.mu.Unlock()
	if reg, _, ok := in.Describe("10.0.0.2:80"); !ok || !reg.Equal(restarted) {
		t.Fatalf("Describe = %v, %v; want the newest registration's time %v", reg, ok, restarted)
	}
	if id, czxid, ok := in.Registration("10.0.0.2:80"); !ok || id != "a-new" || czxid != 9 {
		t.Fatalf("Registration = %q, %d, %v; want a-new, 9", id, czxid, ok)
	}
	if _, _, ok := in.Registration("10.0.0.9:80"); ok {
		t.Fatal("Registration of a string not published is ok")
	}
}

// A node deleted and created again under the same string in one batch of
// changes (a restart on the same address, a node re-created in a new
// session) leaves the strings as they were, but it is a new registration:
// subscribers hear of it.
func TestARegistrationReplacedUnderTheSameStringIsPublished(t *testing.T) {
	in := &Instancer{entries: map[string]*entry{}, first: make(chan struct{})}
	storeEntry(in, "a", "a", "10.0.0.1:80", 3, time.Now())
	storeEntry(in, "b", "b", "10.0.0.2:80", 4, time.Now())
	publish := func() uint64 {
		in.mu.Lock()
		defer in.mu.Unlock()
		in.publishLocked()
		return in.version
	}
	v := publish()
	if again := publish(); again != v {
		t.Fatalf("an unchanged set was published again (version %d, then %d)", v, again)
	}
	delete(in.entries, "b")
	storeEntry(in, "b2", "b2", "10.0.0.2:80", 8, time.Now())
	if got := publish(); got == v {
		t.Fatal("b replaced by b2 on the same address was not published")
	}
	v = publish()
	storeEntry(in, "b2", "b2", "10.0.0.2:80", 11, time.Now()) // same id, a new node
	if got := publish(); got == v {
		t.Fatal("b2's node re-created was not published")
	}
}
