package sd

import "github.com/gracekit/gracekit/internal/failpoint"

// The library's failpoints (internal/failpoint): empty and inlined away
// unless built with the gracekit_failpoints tag.
const (
	fpDeregisterBeforeDelete = failpoint.DeregisterBeforeDelete
	fpRegisterAfterCreate    = failpoint.RegisterAfterCreate
)

func inject(name string) { failpoint.Inject(name) }
