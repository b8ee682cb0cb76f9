package shutdown

import (
	"context"
	"net"
	"strconv"

	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/sd"
)

// DiscoveryEvicter evicts from a gateway's discovery and load balancing at
// once: the instance leaves the sd.Instancer's published set (a tombstone
// keeps it out until ZooKeeper shows it gone or re-created), and every
// endpointer over that Instancer stops picking it before Evict returns.
// Endpointers are told the instance as the Instancer publishes it
// (sd.Instancer.Published), and as the request names it.
func DiscoveryEvicter(in *sd.Instancer, eps ...*endpoint.Endpointer) Evicter {
	return EvicterFunc(func(ctx context.Context, inst Instance) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		// The request's address, and ZooKeeper's record of it if that differs.
		names := []string{net.JoinHostPort(inst.Address, strconv.Itoa(inst.Port))}
		if known, ok := in.Evict(inst.ID); ok {
			if name := in.Published(known); name != names[0] {
				names = append(names, name)
			}
		}
		for _, e := range eps {
			for _, n := range names {
				e.Evict(n)
			}
		}
		return nil
	})
}
