package endpoint

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitlb "github.com/go-kit/kit/sd/lb"
)

// countingInstancer is a chanInstancer that counts its service's
// instances as sd.Instancer does: registered ones, whatever their status,
// and those UP.
type countingInstancer struct {
	*chanInstancer
	mu             sync.Mutex
	registered, up int
}

func (c *countingInstancer) CountInstances() (string, int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return "quote", c.registered, c.up
}

func (c *countingInstancer) count(registered, up int) {
	c.mu.Lock()
	c.registered, c.up = registered, up
	c.mu.Unlock()
}

var _ InstanceCounter = (*countingInstancer)(nil)

// Issue 39, item 6: a balancer with nothing to pick names the service and
// says why: none registered, none UP, all evicted by a flush, or a factory
// that failed for each; errors.Is(err, lb.ErrNoEndpoints) holds, as it
// does for go-kit's balancers, and the retry counts it NotSent.
func TestNoEndpointsSaysWhichServiceAndWhy(t *testing.T) {
	src := &countingInstancer{chanInstancer: newChanInstancer()}
	fl := newFleet()
	failing := map[string]bool{"c:1": true}
	e, err := NewEndpointer(src, func(instance string) (kitendpoint.Endpoint, io.Closer, error) {
		if failing[instance] {
			return nil, nil, errors.New("bad instance")
		}
		return fl.factory(instance)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	tests := []struct {
		name  string
		setup func()
		want  string
	}{
		{
			name:  "none registered",
			setup: func() { src.count(0, 0) },
			want:  `endpoint: no endpoints available for service "quote": no instance is registered`,
		},
		{
			name:  "registered but none UP",
			setup: func() { src.count(2, 0) },
			want:  `endpoint: no endpoints available for service "quote": 2 instances registered, none UP (all out of service: stopping, unhealthy or drained)`,
		},
		{
			name: "listed and all evicted by a flush",
			setup: func() {
				src.count(2, 2)
				src.Set("a:1", "b:1")
				settle(e)
				e.Evict("a:1")
				e.Evict("b:1")
			},
			want: `endpoint: no endpoints available for service "quote": 2 instances UP, all evicted by a flush (each back when it registers again, or after the eviction hold)`,
		},
		{
			name: "listed and the factory failed",
			setup: func() {
				src.count(1, 1)
				src.Set("c:1")
				settle(e)
			},
			want: `endpoint: no endpoints available for service "quote": 1 instance UP, and the factory failed for each (see the log's "factory failed" lines)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.setup()
			for name, b := range balancers(t, e) {
				_, err := b.Endpoint()
				var ne *NoEndpointsError
				if !errors.Is(err, kitlb.ErrNoEndpoints) || !errors.As(err, &ne) || ne.Service != "quote" {
					t.Fatalf("%s: %v, want a *NoEndpointsError for quote that is lb.ErrNoEndpoints", name, err)
				}
				if err.Error() != tt.want {
					t.Errorf("%s: %q\nwant %q", name, err, tt.want)
				}
			}
			rr, _ := NewRoundRobin(e)
			retry, err := NewRetry(rr, Attempts(2))
			if err != nil {
				t.Fatal(err)
			}
			_, err = retry(context.Background(), nil)
			var re *RetryError
			var ne *NoEndpointsError
			if !errors.As(err, &re) || len(re.Attempts) != 2 || !errors.As(err, &ne) || !errors.Is(err, kitlb.ErrNoEndpoints) || !strings.Contains(err.Error(), tt.want[len("endpoint: "):]) {
				t.Errorf("through a retry: %v; want two NotSent attempts, each saying why", err)
			}
		})
	}
}

// Over an Instancer that counts nothing (go-kit's), the error says what
// the Endpointer knows, and is still lb.ErrNoEndpoints.
func TestNoEndpointsOverAnInstancerThatCountsNothing(t *testing.T) {
	e, _, _ := newTestEndpointer(t, nil)
	rr, _ := NewRoundRobin(e)
	_, err := rr.Endpoint()
	var ne *NoEndpointsError
	if !errors.Is(err, kitlb.ErrNoEndpoints) || !errors.As(err, &ne) || ne.Counted || ne.Service != "" {
		t.Fatalf("got %v, want a *NoEndpointsError without counts that is lb.ErrNoEndpoints", err)
	}
	if want := "endpoint: no endpoints available: the Instancer lists no instance"; err.Error() != want {
		t.Errorf("%q, want %q", err, want)
	}
}
