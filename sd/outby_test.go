package sd_test

import (
	"errors"
	"testing"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
)

// Issue 22: SetStatusBy writes its mark with the status, in one setData;
// SetStatus(OUT_OF_SERVICE) keeps it, UP removes it. The mark is a
// record, never a hold: UP is written at once, unlike under a drain.
func TestSetStatusByMarksTheNodeAndNeverHoldsIt(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	cl := newClient(t, c)
	conn := testutil.ZKConn(t, c.Addrs())
	r := register(t, cl, sd.Instance{Name: "quote", ID: "q1", Address: "127.0.0.1", Port: 8081}, sd.BasePath(base))
	node := func() (sd.Instance, int32) {
		t.Helper()
		data, st, err := conn.Get(r.Path())
		if err != nil {
			t.Fatal(err)
		}
		inst, err := sd.CuratorCodec{}.Decode("quote", "q1", data)
		if err != nil {
			t.Fatal(err)
		}
		return inst, st.Version
	}
	var ce *sd.ConfigError
	if err := r.SetStatusBy(ctxFor(t), sd.StatusUp, sd.OutByHealth); !errors.As(err, &ce) {
		t.Fatalf("SetStatusBy(UP, health) = %v, want a ConfigError", err)
	}
	_, v := node()
	if err := r.SetStatusBy(ctxFor(t), sd.StatusOutOfService, sd.OutByHealth); err != nil {
		t.Fatal(err)
	}
	inst, v1 := node()
	if inst.Status() != sd.StatusOutOfService || inst.Metadata[sd.MetadataOutBy] != sd.OutByHealth || sd.OutOfServiceBy(inst) != sd.OutByHealth || v1 != v+1 {
		t.Fatalf("node %+v version %d, want OUT_OF_SERVICE out_by health in one setData (version %d)", inst.Metadata, v1, v+1)
	}
	if err := r.SetStatus(ctxFor(t), sd.StatusOutOfService); err != nil {
		t.Fatal(err)
	}
	if inst, v2 := node(); inst.Metadata[sd.MetadataOutBy] != sd.OutByHealth || v2 != v1 {
		t.Fatalf("SetStatus(OUT_OF_SERVICE) after SetStatusBy: %+v version %d, want the mark kept, no write", inst.Metadata, v2)
	}
	if err := r.SetStatus(ctxFor(t), sd.StatusUp); err != nil {
		t.Fatal(err)
	}
	inst, v3 := node()
	if _, marked := inst.Metadata[sd.MetadataOutBy]; inst.Status() != sd.StatusUp || marked || sd.OutOfServiceBy(inst) != "" || v3 != v1+1 {
		t.Fatalf("node after SetStatus(UP): %+v version %d, want UP unmarked in one setData", inst.Metadata, v3)
	}
	if r.DrainedBy() != "" {
		t.Fatalf("DrainedBy %q: a health mark is not a drain", r.DrainedBy())
	}
}
