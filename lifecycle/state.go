package lifecycle

import "fmt"

// State is where an object that starts something is in its life: a
// Session (sd.Session), a Provider (provider.Provider) or a Consumer
// (consumer.Consumer). They share one state machine, written down in the
// README ("Start and Stop") and in each type's documentation:
//
//	state     Start                          Stop
//	New       -> Starting                    -> Stopped, nothing to undo
//	Starting  waits for it, then as below    cancels the start, waits, then as below
//	Started   ErrStarted, changes nothing    -> Stopping -> Stopped
//	Stopping  ErrStopped, changes nothing    waits for the first Stop, same result
//	Stopped   ErrStopped, changes nothing    the first Stop's result
//	Failed    -> Starting: a retry           -> Stopped, nothing to undo
//
// A Start whose ctx is already done returns ctx's error and changes
// nothing. A failed Start undid what it did before it returned: a Failed
// object holds nothing. sd.Session, shared by roles, counts shares on top
// of this (see its documentation).
type State int32

// The states, in the order an object goes through them; Failed is where a
// failed Start leaves it.
const (
	StateNew State = iota
	StateStarting
	StateStarted
	StateStopping
	StateStopped
	StateFailed
)

func (s State) String() string {
	switch s {
	case StateNew:
		return "new"
	case StateStarting:
		return "starting"
	case StateStarted:
		return "started"
	case StateStopping:
		return "stopping"
	case StateStopped:
		return "stopped"
	case StateFailed:
		return "failed"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}
