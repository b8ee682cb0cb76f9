package flush

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Spring-style flush query parameters: GET <url>?applicationName=&host=&id=.
const (
	SpringParamService = "applicationName"
	SpringParamHost    = "host"
	SpringParamID      = "id"
)

// MaxSpringParamLen is the longest Spring-style flush parameter accepted,
// in bytes.
const MaxSpringParamLen = 255

// ParseSpringQuery reads a Spring-style flush query, as SpringTargets sends
// it: applicationName (the service) and id are required, host is an address
// or address:port and optional. Each parameter may appear once, at most
// MaxSpringParamLen bytes of printable UTF-8. The result has no Czxid and no
// Target: the Spring mode is unauthenticated, and a gateway that accepts it
// must not evict more than its own discovery lists (see the README's
// Security section).
func ParseSpringQuery(q url.Values) (Request, error) {
	get := func(key string, required bool) (string, error) {
		vs := q[key]
		switch {
		case len(vs) == 0 && !required:
			return "", nil
		case len(vs) == 0:
			return "", fmt.Errorf("flush: spring flush query lacks %s (required)", key)
		case len(vs) > 1:
			return "", fmt.Errorf("flush: spring flush query has %d values of %s (maximum 1)", len(vs), key)
		}
		v := vs[0]
		if required && v == "" {
			return "", fmt.Errorf("flush: spring flush query has an empty %s (required)", key)
		}
		if len(v) > MaxSpringParamLen {
			return "", fmt.Errorf("flush: spring flush %s is %d bytes (maximum %d)", key, len(v), MaxSpringParamLen)
		}
		if !utf8.ValidString(v) || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return "", fmt.Errorf("flush: spring flush %s %q is not printable UTF-8", key, v)
		}
		return v, nil
	}
	var req Request
	var err error
	if req.Service, err = get(SpringParamService, true); err != nil {
		return Request{}, err
	}
	if req.ID, err = get(SpringParamID, true); err != nil {
		return Request{}, err
	}
	host, err := get(SpringParamHost, false)
	if err != nil {
		return Request{}, err
	}
	if req.Address, req.Port, err = splitSpringHost(host); err != nil {
		return Request{}, err
	}
	return req, nil
}

// splitSpringHost splits "address", "address:port" or "[v6]:port"; a bare
// IPv6 address is an address.
func splitSpringHost(host string) (string, int, error) {
	if host == "" {
		return "", 0, nil
	}
	if strings.Count(host, ":") > 1 && !strings.HasPrefix(host, "[") {
		if net.ParseIP(host) == nil {
			return "", 0, fmt.Errorf("flush: spring flush host %q is not an address or address:port", host)
		}
		return host, 0, nil
	}
	if !strings.Contains(host, ":") {
		return host, 0, nil
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		if net.ParseIP(host[1:len(host)-1]) == nil {
			return "", 0, fmt.Errorf("flush: spring flush host %q is not an address or address:port", host)
		}
		return host[1 : len(host)-1], 0, nil
	}
	addr, p, err := net.SplitHostPort(host)
	if err != nil || addr == "" {
		return "", 0, fmt.Errorf("flush: spring flush host %q is not an address or address:port", host)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("flush: spring flush port %q out of range (1 to 65535)", p)
	}
	return addr, port, nil
}
