package zktest

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A TLS port that accepts connections but has not finished a handshake is
// not serving: a JVM's first handshake loads and compiles its TLS code,
// and a test whose Client met that (each try bounded) had no session
// within 30 s under make test's load.
func TestATLSPortThatAcceptsButNeverHandshakesIsNotServing(t *testing.T) {
	t.Parallel()
	pki, err := NewPKI(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accepts and holds every connection, says nothing
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	port, _ := strconv.Atoi(strings.TrimPrefix(ln.Addr().String(), "127.0.0.1:"))
	s := &Server{SecureClientPort: port, pki: pki}
	if err := s.secureListening(time.Now().Add(300 * time.Millisecond)); err == nil {
		t.Fatal("secureListening = <nil> for a port that never answered TLS, want an error")
	}
}
