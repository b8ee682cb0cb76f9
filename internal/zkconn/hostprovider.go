package zkconn

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"
)

// lookupTimeout bounds each round of name lookups.
const lookupTimeout = 3 * time.Second

// NewHostProvider returns a HostProvider that warns on logger of the names
// that do not resolve. Call Init before anything else.
func NewHostProvider(logger *slog.Logger) *HostProvider {
	return &HostProvider{logger: logger}
}

// HostProvider is a zk.HostProvider that tolerates members whose name does
// not resolve: the order in which every session of one client (go-zookeeper's
// and the zkwire ones) tries the ensemble's servers. Written by hand because go-zookeeper's DNSHostProvider fails
// the whole connect when one name of the connect string does not resolve,
// so one decommissioned host name kept every client of the ensemble down.
// Names that fail are looked up again each time the list has been tried
// through without a connection.
type HostProvider struct {
	logger *slog.Logger
	lookup func(ctx context.Context, host string) ([]string, error) // nil: net.DefaultResolver

	mu         sync.Mutex
	servers    []string // resolved host:port
	unresolved []string // host:port whose host did not resolve
	given      []string // what Init was given
	curr, last int
}

func (hp *HostProvider) resolve(servers []string) (found, failed []string, errs []error) {
	lookup := hp.lookup
	if lookup == nil {
		lookup = net.DefaultResolver.LookupHost
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	for _, s := range servers {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			failed, errs = append(failed, s), append(errs, err)
			continue
		}
		addrs, err := lookup(ctx, host)
		if err != nil || len(addrs) == 0 {
			failed, errs = append(failed, s), append(errs, err)
			continue
		}
		for _, a := range addrs {
			found = append(found, net.JoinHostPort(a, port))
		}
	}
	return found, failed, errs
}

// Init implements zk.HostProvider: it fails only when no name resolves.
// Called again with the same servers (NewClient's Init, then Connect's),
// it keeps the order it chose.
func (hp *HostProvider) Init(servers []string) error {
	hp.mu.Lock()
	again := hp.servers != nil && sameSet(servers, hp.given)
	hp.mu.Unlock()
	if again {
		return nil
	}
	found, failed, errs := hp.resolve(servers)
	if len(found) == 0 {
		return fmt.Errorf("sd: no server of %v resolves (%v): check the connect string's host names", servers, errs)
	}
	for i, s := range failed {
		hp.logger.Warn("a ZooKeeper server name does not resolve; using the others", "server", s, "err", errs[i])
	}
	rand.Shuffle(len(found), func(i, j int) { found[i], found[j] = found[j], found[i] })
	hp.mu.Lock()
	defer hp.mu.Unlock()
	hp.servers, hp.unresolved, hp.given = found, failed, servers
	hp.curr, hp.last = -1, -1
	return nil
}

// sameSet tells whether a and b hold the same servers in any order
// (go-zookeeper shuffles the list it passes).
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// Len implements zk.HostProvider.
func (hp *HostProvider) Len() int {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	return len(hp.servers)
}

// Next implements zk.HostProvider.
func (hp *HostProvider) Next() (string, bool) {
	hp.mu.Lock()
	hp.curr = (hp.curr + 1) % len(hp.servers)
	retryStart := hp.curr == hp.last
	if hp.last == -1 {
		hp.last = 0
	}
	server := hp.servers[hp.curr]
	pending := retryStart && len(hp.unresolved) > 0
	unresolved := hp.unresolved
	hp.mu.Unlock()
	if pending {
		// Every known member failed: perhaps a name resolves by now.
		if found, failed, _ := hp.resolve(unresolved); len(found) > 0 {
			hp.mu.Lock()
			hp.servers = append(hp.servers, found...)
			hp.unresolved = failed
			hp.mu.Unlock()
		}
	}
	return server, retryStart
}

// Connected implements zk.HostProvider.
func (hp *HostProvider) Connected() {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	hp.last = hp.curr
}

// List is the servers in the order Next hands them out from Init: the
// watch session dials them in the same shuffled order.
func (hp *HostProvider) List() []string {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	return slices.Clone(hp.servers)
}
