package sd_test

import (
	"context"
	"testing"
	"time"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/sd"
)

// Issue 16: an eviction ends when the node's data is written again after
// it (a newer data version): an instance that left rotation and came back
// UP returns at once, not when the tombstone's TTL passes.
func TestAnEvictionEndsWhenTheNodeIsWrittenAgain(t *testing.T) {
	t.Parallel()
	c, base := sharedZK(t)
	at := sd.BasePath(base)
	provider, consumer := newClient(t, c), newClient(t, c)
	reg := register(t, provider, instance("back", 1401), at)
	in, ch := newInstancer(t, consumer, "back", sd.TombstoneTTL(time.Hour), at)
	waitSet(t, ch, "127.0.0.1:1401")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := reg.SetStatus(ctx, sd.StatusOutOfService); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch)
	if _, res := in.EvictRegistration("back-1401", reg.Czxid()); res != sd.Evicted {
		t.Fatalf("evict: %s", res)
	}
	if err := reg.SetStatus(ctx, sd.StatusUp); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch, "127.0.0.1:1401")
}

// An eviction of a node nobody writes again lasts until the TTL, which is
// endpoint.DefaultEvictionHold by default.
func TestTheDefaultTombstoneTTLIsTheEndpointersHold(t *testing.T) {
	if sd.DefaultTombstoneTTL != endpoint.DefaultEvictionHold {
		t.Fatalf("DefaultTombstoneTTL %s, want endpoint.DefaultEvictionHold (%s): a flush would keep an instance out of a gateway longer than the README says", sd.DefaultTombstoneTTL, endpoint.DefaultEvictionHold)
	}
}
