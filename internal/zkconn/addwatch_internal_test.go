package zkconn

import (
	"errors"
	"testing"

	"github.com/gracekit/gracekit/internal/zkwire"
)

// Only the answers of a server that cannot hold persistent watches switch
// a Client to per-node watches; every other failure of addWatch is tried
// again.
func TestOnlyACannotAnswerToAddWatchIsARefusal(t *testing.T) {
	tests := []struct {
		name string
		give error
		want bool
	}{
		{"UNIMPLEMENTED (ZooKeeper 3.5) is a refusal", &zkwire.Error{Code: zkwire.CodeUnimplemented}, true},
		{"MARSHALLINGERROR (WatchManagerOptimized) is a refusal", &zkwire.Error{Code: zkwire.CodeMarshalling}, true},
		{"a throttled request is not", &zkwire.Error{Code: zkwire.CodeThrottled}, false},
		{"an ACL's NOAUTH is not", &zkwire.Error{Code: zkwire.CodeNoAuth}, false},
		{"a lost connection is not", zkwire.ErrClosed, false},
		{"a wrapped UNIMPLEMENTED is a refusal", errors.Join(errors.New("sd: add a recursive watch"), &zkwire.Error{Code: zkwire.CodeUnimplemented}), true},
		{"no error is not", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := addWatchRefused(tt.give); got != tt.want {
				t.Errorf("addWatchRefused(%v) = %v, want %v", tt.give, got, tt.want)
			}
		})
	}
}
