package sd

import "sync/atomic"

// Planted bugs for the chaos suite's mutation mode (make chaos
// CHAOS_MUTANTS=1). Each is a constant that is false unless the build has
// its tag (mutant_<name>.go); the compiler drops the code behind a false
// one. These helpers are the bugs' bodies.

var mutantDeletions atomic.Uint64

// dropDeletion is true for one deletion in five (mutant dropdelete).
func dropDeletion() bool { return mutantDeletions.Add(1)%5 == 0 }

// publishUnread publishes the stored set as ZooKeeper's own, before the
// re-read of a reconnect has answered (mutant noreread).
func (in *Instancer) publishUnread() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.firstDone {
		in.pubErr = nil
		in.publishLocked()
	}
}

// mutantDrainedBy is the operator's marker as the Registrar reads it:
// mutant ignoredrain never sees one.
func mutantDrainedBy(by string) string {
	if mutantIgnoreDrain {
		return ""
	}
	return by
}
