package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// Headers that carry an order's idempotency key. A client sends
// Idempotency-Key; the demo's gateways pass it on as Order-Key, because Go's
// http.Transport takes a POST carrying Idempotency-Key for one it may replay
// on a broken keep-alive connection (it assumes the server deduplicates),
// and this provider deliberately does not (see examples/CONTRACT.md).
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderOrderKey       = "Order-Key"
)

// maxKeyLen bounds a key: one ledger line stays one small, atomic append.
const maxKeyLen = 128

// ledger appends the key of every order the provider executes to a file,
// one key per line, opened with O_APPEND: each line is one write(2), so
// several processes may share the file. It is safe for concurrent use.
type ledger struct {
	mu sync.Mutex
	f  *os.File
}

func openLedger(path string) (*ledger, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open PROVIDER_LEDGER: %w", err)
	}
	return &ledger{f: f}, nil
}

var errBadKey = errors.New("bad idempotency key")

// checkKey accepts a printable ASCII key without spaces, at most maxKeyLen
// bytes ("" is no key).
func checkKey(key string) error {
	if len(key) > maxKeyLen || strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return fmt.Errorf("%w: %d bytes, want at most %d of printable ASCII without spaces", errBadKey, len(key), maxKeyLen)
	}
	return nil
}

// Append writes key and a newline in one write. A nil ledger or an empty
// key writes nothing.
func (l *ledger) Append(key string) error {
	if l == nil || key == "" {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.f.Write([]byte(key + "\n"))
	return err
}

func (l *ledger) Close() error {
	if l == nil {
		return nil
	}
	return l.f.Close()
}
