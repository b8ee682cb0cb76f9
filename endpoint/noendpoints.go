package endpoint

import (
	"fmt"
	"strings"

	kitlb "github.com/go-kit/kit/sd/lb"
)

// InstanceCounter is implemented by an Instancer that can count the
// instances registered for its service, whatever their status
// (sd.Instancer does). A balancer over an [Endpointer] whose Instancer is
// one names the service in its [*NoEndpointsError] and says whether no
// instance is registered or none is UP. CountInstances is called only
// when a balancer finds no endpoint; it must not block on I/O.
type InstanceCounter interface {
	// CountInstances returns the service's name, the instances
	// registered under it as last read, and how many of those are UP.
	CountInstances() (service string, registered, up int)
}

// NoEndpointsError is the error of a balancer over an [Endpointer] that has
// no endpoint to pick. It says why, as far as the Endpointer knows:
// no instance registered, none UP, all evicted by a flush, or the factory
// failed for each. errors.Is(err, lb.ErrNoEndpoints) holds, as it does for
// go-kit's own balancers, and [Classify] calls it [NotSent].
type NoEndpointsError struct {
	// Service is the service's name; "" when the Instancer is no
	// [InstanceCounter].
	Service string
	// Counted is true when the Instancer is an [InstanceCounter]:
	// Registered and Up are then its counts.
	Counted        bool
	Registered, Up int
	// Listed is how many instances the Instancer publishes (UP, and not
	// evicted by a flush at the Instancer); Evicted is how many of those
	// a flush took out of this Endpointer (see [Endpointer.Evict]). The
	// factory failed for the others.
	Listed, Evicted int
}

func (e *NoEndpointsError) Error() string {
	var b strings.Builder
	b.WriteString("endpoint: no endpoints available")
	if e.Service != "" {
		fmt.Fprintf(&b, " for service %q", e.Service)
	}
	b.WriteString(": ")
	switch {
	case e.Listed > 0 && e.Evicted == e.Listed:
		fmt.Fprintf(&b, "%s UP, all evicted by a flush (each back when it registers again, or after the eviction hold)", count(e.Listed, "instance"))
	case e.Listed > 0 && e.Evicted > 0:
		fmt.Fprintf(&b, "%s UP, %d evicted by a flush, and the factory failed for the others (see the log's \"factory failed\" lines)", count(e.Listed, "instance"), e.Evicted)
	case e.Listed > 0:
		fmt.Fprintf(&b, "%s UP, and the factory failed for each (see the log's \"factory failed\" lines)", count(e.Listed, "instance"))
	case !e.Counted:
		b.WriteString("the Instancer lists no instance")
	case e.Registered == 0:
		b.WriteString("no instance is registered")
	case e.Up == 0:
		fmt.Fprintf(&b, "%s registered, none UP (all out of service: stopping, unhealthy or drained)", count(e.Registered, "instance"))
	default:
		fmt.Fprintf(&b, "%s registered, %d UP, all evicted by a flush (each back when it registers again, or after the eviction hold)", count(e.Registered, "instance"), e.Up)
	}
	return b.String()
}

// Unwrap returns go-kit's lb.ErrNoEndpoints.
func (e *NoEndpointsError) Unwrap() error { return kitlb.ErrNoEndpoints }

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// noEndpoints says why e has no endpoint now.
func (e *Endpointer) noEndpoints() error {
	e.mu.Lock()
	ne := &NoEndpointsError{Listed: len(e.listed)}
	for _, name := range e.listed {
		if _, dead := e.tombstones[name]; dead {
			ne.Evicted++
		}
	}
	e.mu.Unlock()
	if c := e.counter; c != nil {
		ne.Service, ne.Registered, ne.Up = c.CountInstances()
		ne.Counted = true
	}
	return ne
}
