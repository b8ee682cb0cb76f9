package flush

import (
	"context"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/sd"
)

// DiscoveryEvicter evicts from a gateway's discovery and load balancing at
// once, but only the registration a request names: the Instancer evicts the
// instance with req.ID if it lists it from the node created at req.Czxid
// (sd.Instancer.EvictRegistration; 0 matches any registration, which the
// Handler never passes). Then, and only then, every endpointer over that
// Instancer stops picking the instance, by the string the Instancer
// publishes for it (sd.Instancer.Published), before Evict returns. The
// address in the request is never used: a request naming an id the
// Instancer does not list, or another registration of it, evicts nothing
// and gets NotListed or OtherRegistration.
func DiscoveryEvicter(in *sd.Instancer, eps ...*endpoint.Endpointer) Evicter {
	return EvicterFunc(func(ctx context.Context, req Request) (Result, error) {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		known, res := in.EvictRegistration(req.ID, req.Czxid)
		switch res {
		case sd.Evicted:
		case sd.OtherRegistration:
			return OtherRegistration, nil
		default:
			return NotListed, nil
		}
		name := in.Published(known)
		for _, e := range eps {
			e.Evict(name)
		}
		return Evicted, nil
	})
}
