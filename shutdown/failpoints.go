package shutdown

import "github.com/gracekit/gracekit/internal/failpoint"

// fpStopAfterFlush is the stop's failpoint between its flush and its
// drain (internal/failpoint): empty and inlined away unless built with the
// gracekit_failpoints tag.
const fpStopAfterFlush = failpoint.StopAfterFlush

func inject(name string) { failpoint.Inject(name) }
