package endpoint

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	kitendpoint "github.com/go-kit/kit/endpoint"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// Issue 8, case 9: an eviction by address that discovery never confirms
// (the provider stays registered and healthy) ends after the eviction hold.
func TestAHealthyProviderEvictedByAddressComesBackAfterTheEvictionHold(t *testing.T) {
	zkc := zktest.New(t)
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer provider.Close()
	host, p, _ := net.SplitHostPort(provider.Listener.Addr().String())
	port, _ := strconv.Atoi(p)

	client, err := sd.NewClient(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	reg, err := sd.NewRegistrar(client, sd.Instance{Name: "orders", ID: "orders-1", Address: host, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLimit)
	defer cancel()
	if err := reg.RegisterContext(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reg.DeregisterContext(context.Background()) }()
	in, err := sd.NewInstancer(client, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Stop()
	f, err := NewHTTPFactory(http.MethodGet, "/", encodeNothing, decodeStatus)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e, err := NewEndpointer(in, f.Factory, EvictionHold(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	addr := net.JoinHostPort(host, p)
	testutil.WaitFor(t, "the endpointer lists the provider", func() bool { return slices.Contains(e.Instances(), addr) })
	e.Evict(addr)
	if got := e.Instances(); slices.Contains(got, addr) {
		t.Fatalf("instances = %v right after the eviction", got)
	}
	// ZooKeeper still lists the provider and nothing changes there: only
	// the hold can bring it back.
	testutil.WaitFor(t, "the evicted provider comes back", func() bool { return slices.Contains(e.Instances(), addr) })
	rr, err := NewRoundRobin(e)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := rr.Endpoint()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ep(ctx, nil); err != nil {
		t.Fatalf("a call to the provider that came back: %v", err)
	}
}

// Issue 8, case 9: the hold ends early when discovery stops listing the
// instance, and a second Evict does not extend it.
func TestAnEvictionEndsWhenDiscoveryDropsTheInstanceOrItsHoldEnds(t *testing.T) {
	e, src, _ := newTestEndpointer(t, []string{"a", "b"}, EvictionHold(time.Hour))
	e.Evict("b")
	src.Set("a")
	settle(e)
	src.Set("a", "b")
	settle(e)
	if got := e.Instances(); !slices.Contains(got, "b") {
		t.Fatalf("instances = %v, b did not come back after discovery dropped and re-listed it", got)
	}

	short, src2, _ := newTestEndpointer(t, []string{"a", "b"}, EvictionHold(50*time.Millisecond))
	short.Evict("b")
	short.Evict("b")
	testutil.WaitFor(t, "b comes back after its hold", func() bool { return slices.Contains(short.Instances(), "b") })
	src2.Set("a", "b") // an unrelated update keeps it
	settle(short)
	if got := short.Instances(); !slices.Contains(got, "b") {
		t.Fatalf("instances = %v after an update that lists b", got)
	}
}

func TestEvictionHoldRejectsANonPositiveDuration(t *testing.T) {
	_, err := NewEndpointer(newChanInstancer(), func(string) (kitendpoint.Endpoint, io.Closer, error) {
		return nil, nil, nil
	}, EvictionHold(0))
	if err == nil || err.Error() != "endpoint: eviction hold 0s is not positive (minimum is 1ns)" {
		t.Fatalf("err = %v", err)
	}
}

func decodeStatus(_ context.Context, r *http.Response) (any, error) { return r.StatusCode, nil }
