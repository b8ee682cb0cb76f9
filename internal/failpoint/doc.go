// Package failpoint puts named faults inside the library, in the places
// where an interleaving matters and no outside fault can force it: between
// a deregister's exists and its delete, after a create before its reply is
// used, between a watch session's reconnect and its re-added watches, and
// between a stop's flush and its drain (etcd-io/gofail does the same for
// etcd, behind a build tag).
//
// A call site is one line, failpoint.Inject(failpoint.DeregisterBeforeDelete).
// Without the gracekit_failpoints build tag Inject is an empty function the
// compiler inlines away, so a normal build carries no cost. With the tag,
// a point does nothing until it is armed, by Enable or at start from the
// environment variable GRACEKIT_FAILPOINTS:
//
//	GRACEKIT_FAILPOINTS='sd/deregister-before-delete=25%sleep(400ms);shutdown/after-flush=sleep(1s)'
//
// A spec is [P%][N*]sleep(D): with probability P (100 when absent), at most
// N times (no limit when absent), the caller sleeps for D. The chaos suite
// (examples/chaos) arms points at random from its seed.
package failpoint

// The named points. Each is injected at exactly one place.
const (
	// DeregisterBeforeDelete is in sd.Registrar.DeregisterContext, after
	// the Exists that found our node and before its Delete.
	DeregisterBeforeDelete = "sd/deregister-before-delete"
	// RegisterAfterCreate is in the Registrar's create, after the Create
	// returned and before its result is used.
	RegisterAfterCreate = "sd/register-after-create"
	// WatchBeforeRewatch is in the watch session, after a connection was
	// made (a new or resumed session) and before its watches are added.
	WatchBeforeRewatch = "sd/watch-before-rewatch"
	// StopAfterFlush is in shutdown.Sequence's stop, after the flush step
	// and before the quiesce and the drain.
	StopAfterFlush = "shutdown/after-flush"
)

// Names lists every point, for the suite that arms them.
var Names = []string{DeregisterBeforeDelete, RegisterAfterCreate, WatchBeforeRewatch, StopAfterFlush}

// EnvVar is the environment variable read at start under the build tag.
const EnvVar = "GRACEKIT_FAILPOINTS"
