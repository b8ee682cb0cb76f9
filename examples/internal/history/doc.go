// Package history holds what a robustness run of examples/chaos recorded,
// the registry's truth beside what every consumer published, and the
// validators that check the one against the other (the way etcd's
// robustness suite checks its watches): convergence after each heal, no
// resurrection, no phantom, no going back, re-registration after an
// expiry, and the requests of the load.
//
// Times are the recorders' clocks, one process's: the truth's times are
// when its recorder saw a change, a little after ZooKeeper made it, so the
// validators allow Bounds.Skew either way. A registration is a node's life,
// identified by its path and creation zxid (czxid): the same instance id
// registered again is a new registration.
package history
