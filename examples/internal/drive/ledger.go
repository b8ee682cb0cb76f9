package drive

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Ledger is what the providers' ledger files (PROVIDER_LEDGER,
// examples/CONTRACT.md) record: one idempotency key a line, per order
// executed.
type Ledger struct {
	// Execs maps each key to the ledgers that executed it, one entry per
	// line, a ledger being named after its file without the extension
	// ("quote-2.run1" for quote-2.run1.keys).
	Execs map[string][]string
	Lines int // non-empty lines
	Files int // files found
}

// ReadLedgers reads every ledger file of paths; a file that does not
// exist counts as empty (its provider executed no order, or keeps no
// ledger) and is not counted in Files.
func ReadLedgers(paths ...string) (*Ledger, error) {
	lg := &Ledger{Execs: map[string][]string{}}
	for _, p := range paths {
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		lg.Files++
		name := strings.TrimSuffix(filepath.Base(p), filepath.Ext(p))
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			key := strings.TrimSpace(sc.Text())
			if key == "" {
				continue
			}
			lg.Lines++
			lg.Execs[key] = append(lg.Execs[key], name)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("ledger %s: %w", p, err)
		}
	}
	return lg, nil
}
