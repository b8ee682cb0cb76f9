package drive

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// SleepCtx waits d, or until ctx ends, and then returns ctx.Err().
func SleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Tail returns the last n lines of a file, indented, for an error message.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "  (" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  | " + strings.Join(lines, "\n  | ")
}

// WaitReady polls url (a child's /readyz) every 50 ms until it answers
// 200. It fails, quoting the end of the child's log, when p exits first or
// limit passes, and returns ctx.Err() when ctx ends.
func WaitReady(ctx context.Context, id string, p *Proc, url string, limit time.Duration) error {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	deadline := time.Now().Add(limit)
	for {
		if p.Exited() {
			return fmt.Errorf("%s exited (%s) before it was ready; its log %s ends with:\n%s",
				id, p.ExitString(), p.LogPath(), Tail(p.LogPath(), 15))
		}
		if resp, err := client.Get(url); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: /readyz not 200 within %v; its log %s ends with:\n%s",
				id, limit, p.LogPath(), Tail(p.LogPath(), 15))
		}
		if err := SleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// Probe sends one GET to url (a gateway's /api/quote) with client. ok
// tells whether it answered 200, instance is the provider its answer names
// ("" when none), and why says what went wrong otherwise.
func Probe(client *http.Client, url string) (ok bool, instance, why string) {
	resp, err := client.Get(url)
	if err != nil {
		return false, "", err.Error()
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, "", fmt.Sprintf("HTTP %d: %s", resp.StatusCode, Shorten(string(body), 200))
	}
	return true, InstanceOf(body), ""
}
