package zkconn

import "testing"

// Issue 32: the library logs a session id as the CLI's OWNER column and
// the server print it.
func TestHexSessionIsHowZooKeeperPrintsIt(t *testing.T) {
	tests := []struct {
		give int64
		want string
	}{
		{0, "0x0"},
		{0x1000a2b3c4d0005, "0x1000a2b3c4d0005"},
		{-1, "0xffffffffffffffff"},
	}
	for _, tt := range tests {
		if got := HexSession(tt.give); got != tt.want {
			t.Errorf("HexSession(%d) = %q, want %q", tt.give, got, tt.want)
		}
	}
}
