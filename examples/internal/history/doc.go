// Package history holds what a robustness run of examples/chaos recorded,
// the registry's truth beside what every consumer published, every request
// with the instance that served it, every SIGTERM stop with its flush acks,
// and every acknowledged write, and the validators that check them (the
// way etcd's robustness suite checks its watches).
//
// Each validator names its violations (Violation.Check): convergence,
// phantom, resurrection, going-back, re-registration, requests, and
// flush-ack (no request after a gateway acked a stop's flush), after-leave
// (no request longer than Bounds.Leave after ZooKeeper last showed the
// instance UP: deregistered, OUT_OF_SERVICE or drained, one check),
// flush-reach (a stop's flush reached every gateway that routed to it),
// starved (every run gets calls within Bounds.Starve), write-ack (the
// registry held what each acknowledged write promised) and agree (the
// consumers of a service end each round on one set).
//
// Times are the recorders' clocks on one machine. The truth times a
// creation or a write by ZooKeeper's stamp of it (ctime, mtime), kept
// between the reads that bound it, so a consumer ahead of the recorder is
// not charged; a deletion is timed by the read that saw it, and the
// validators allow Bounds.Skew either way. A registration is a node's
// life, identified by its path and creation zxid (czxid): the same
// instance id registered again is a new registration.
package history
