package gwrun

import (
	"fmt"
	"net/netip"
	"os"
)

// DefaultUpstream is the provider service name when GATEWAY_UPSTREAM is
// unset.
const DefaultUpstream = "quote"

// Upstream is GATEWAY_UPSTREAM, the provider service name, or
// DefaultUpstream.
func Upstream() string {
	if u := os.Getenv("GATEWAY_UPSTREAM"); u != "" {
		return u
	}
	return DefaultUpstream
}

// LoopbackOnly reads GATEWAY_LOOPBACK_ONLY: "1" is true, "0" or unset
// false, anything else an error naming the value.
func LoopbackOnly() (bool, error) {
	switch v := os.Getenv("GATEWAY_LOOPBACK_ONLY"); v {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, fmt.Errorf("invalid GATEWAY_LOOPBACK_ONLY %q (1, or 0 or unset)", v)
	}
}

// IsLoopback tells whether host is a loopback IP address (127.0.0.0/8,
// ::1); host names, localhost included, are not.
func IsLoopback(host string) bool {
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
