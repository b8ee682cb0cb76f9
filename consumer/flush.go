package consumer

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown/flush"
)

// Evicter returns the flush.Evicter of service name, false when no
// endpoint was built for it and RoutedInstancer was not asked for it (the
// consumer does not route it). It is the
// flush.EvicterLookup of FlushHandler: it evicts the registration a flush
// names from the service's Instancer, by id and creation zxid, then from
// every Endpointer over it (flush.DiscoveryEvicter), before it returns.
func (c *Consumer) Evicter(name string) (flush.Evicter, bool) {
	c.mu.Lock()
	s, ok := c.services[name]
	routed := ok && (len(s.endpointers) > 0 || s.routed)
	c.mu.Unlock()
	if !routed {
		return nil, false
	}
	return flush.EvicterFunc(func(ctx context.Context, req flush.Request) (flush.Result, error) {
		// Evictions do not block; holding mu keeps an Endpointer being
		// built for this service from missing one.
		c.mu.Lock()
		defer c.mu.Unlock()
		return flush.DiscoveryEvicter(s.in, s.endpointers...).Evict(ctx, req)
	}), true
}

// FlushHandler returns the flush receiver of a gateway: it verifies
// requests signed with secret for one of audiences (the URLs providers
// reach this handler by, see FlushURL) and evicts through Evicter. Only a
// gateway needs one; a plain consumer does not.
func (c *Consumer) FlushHandler(secret []byte, audiences []string, opts ...flush.HandlerOption) (*flush.Handler, error) {
	h, err := flush.NewHandler(secret, audiences, c.Evicter, append([]flush.HandlerOption{flush.WithLogger(c.opts.logger)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("consumer: flush handler: %w", err)
	}
	return h, nil
}

// FlushURL is the flush URL of a gateway instance as providers discover
// it: http://address:port followed by the flush path it registered in its
// metadata (sd.MetadataFlushPath); https when it registered only an SSL
// port; "" without a flush path. A gateway's handler accepts it as its
// audience.
func FlushURL(g sd.Instance) string {
	p := g.Metadata[sd.MetadataFlushPath]
	if p == "" {
		return ""
	}
	scheme, port := "http", g.Port
	if port == 0 && g.SSLPort != 0 {
		scheme, port = "https", g.SSLPort
	}
	return scheme + "://" + net.JoinHostPort(g.Address, strconv.Itoa(port)) + p
}

// GatewayTargets watches the gateway services named and returns the
// flush.TargetSource of their instances' flush URLs (FlushURL), without
// self (a provider that is a gateway too). It waits, within ctx, for each
// service's first load, so that the source, which must not block, finds
// them listed when the stop asks.
func (c *Consumer) GatewayTargets(ctx context.Context, self sd.Instance, services ...string) (flush.TargetSource, error) {
	var ins []*sd.Instancer
	for _, name := range services {
		in, err := c.Instancer(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("consumer: watch flush gateway service %q: %w", name, err)
		}
		ins = append(ins, in)
	}
	return flush.TargetSourceFunc(func() []string {
		var urls []string
		for _, in := range ins {
			for _, g := range in.Instances() {
				if u := FlushURL(g); u != "" && (g.Name != self.Name || g.ID != self.ID) {
					urls = append(urls, u)
				}
			}
		}
		return urls
	}), nil
}
