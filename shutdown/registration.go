package shutdown

import (
	"context"

	"github.com/gracekit/gracekit/sd"
)

// Registration is the instance's registration in service discovery, which
// the start and stop steps drive. gracekit's sd.Registrar implements it. Each method must honor ctx and
// return an error when the change could not be made.
type Registration interface {
	// RegisterContext creates this instance's node with status UP.
	RegisterContext(ctx context.Context) error
	// SetStatus changes the status in this instance's node.
	SetStatus(ctx context.Context, s sd.Status) error
	// DeregisterContext deletes this instance's node.
	DeregisterContext(ctx context.Context) error
}

// registeredReporter is implemented by a Registration whose
// RegisterContext may leave the work to the background (a provider that
// registers once ZooKeeper answers): Registered reports whether it did.
// The stop flushes no gateway for an instance that never registered: no
// gateway could list it, and its flush has no registration to name.
type registeredReporter interface {
	Registered() bool
}
