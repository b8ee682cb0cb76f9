package testutil

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// Logs is a slog.Handler that keeps every record, with the attributes
// added by With, for tests that assert on log lines. Make one with
// NewLogs; it is safe for concurrent use.
type Logs struct {
	mu    *sync.Mutex
	recs  *[]Log
	attrs []slog.Attr
}

// Log is one record kept by Logs: its level, message and attributes
// (those of With first), values as text.
type Log struct {
	Time    time.Time
	Level   slog.Level
	Message string
	Attrs   map[string]string
}

// NewLogs returns an empty Logs and a logger over it.
func NewLogs() (*Logs, *slog.Logger) {
	l := &Logs{mu: new(sync.Mutex), recs: new([]Log)}
	return l, slog.New(l)
}

func (l *Logs) Enabled(context.Context, slog.Level) bool { return true }

func (l *Logs) Handle(_ context.Context, r slog.Record) error {
	rec := Log{Time: r.Time, Level: r.Level, Message: r.Message, Attrs: map[string]string{}}
	add := func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.Resolve().String()
		return true
	}
	for _, a := range l.attrs {
		add(a)
	}
	r.Attrs(add)
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.recs = append(*l.recs, rec)
	return nil
}

func (l *Logs) WithAttrs(as []slog.Attr) slog.Handler {
	c := *l
	c.attrs = append(slices.Clip(l.attrs), as...)
	return &c
}

func (l *Logs) WithGroup(string) slog.Handler { return l }

// All returns the records kept so far, at level or above.
func (l *Logs) All(level slog.Level) []Log {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Log
	for _, r := range *l.recs {
		if r.Level >= level {
			out = append(out, r)
		}
	}
	return out
}

// Messages returns the records whose message is msg.
func (l *Logs) Messages(msg string) []Log {
	var out []Log
	for _, r := range l.All(slog.LevelDebug - 100) {
		if r.Message == msg {
			out = append(out, r)
		}
	}
	return out
}

// String renders the records kept, one a line, for a test's failure
// message.
func (l *Logs) String() string {
	var b strings.Builder
	for _, r := range l.All(slog.LevelDebug - 100) {
		fmt.Fprintf(&b, "%s %q", r.Level, r.Message)
		keys := make([]string, 0, len(r.Attrs))
		for k := range r.Attrs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%s", k, r.Attrs[k])
		}
		b.WriteByte('\n')
	}
	return b.String()
}
