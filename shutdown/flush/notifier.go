package flush

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// TargetSource supplies flush URLs discovered at run time, such as the
// gateways registered in ZooKeeper. FlushTargets returns full URLs; it is
// called once per Flush and must not block.
type TargetSource interface {
	FlushTargets() []string
}

// TargetSourceFunc adapts a func to TargetSource.
type TargetSourceFunc func() []string

// FlushTargets returns f().
func (f TargetSourceFunc) FlushTargets() []string { return f() }

// Report is the outcome of the flush call to one target.
type Report struct {
	// Target is the URL, with any password redacted.
	Target string
	// Spring is true for a Spring-style GET target.
	Spring bool
	// Acked is true when the target answered 2xx.
	Acked bool
	// Result is what the gateway said it did (HeaderResult): Evicted, or
	// NotListed, OtherRegistration or NotRouted when it changed nothing.
	// Empty when it did not say, as Spring targets do not.
	Result Result
	// Attempts is how many requests were sent.
	Attempts int
	// Duration is the time from the first attempt to the outcome.
	Duration time.Duration
	// Err says why the target did not ack; nil if it did.
	Err error
}

// TargetError is the error for one target that did not ack.
type TargetError struct {
	Target   string
	Attempts int
	Err      error
}

func (e *TargetError) Error() string {
	return fmt.Sprintf("flush: flush %s not acknowledged after %d attempt(s): %v", e.Target, e.Attempts, e.Err)
}

// Unwrap returns the cause.
func (e *TargetError) Unwrap() error { return e.Err }

// Notifier tells gateways to evict this instance. It is safe for concurrent
// use.
type Notifier struct {
	self    Self
	secret  []byte
	opts    *notifierOptions
	client  *http.Client
	owned   bool // the Notifier made client and closes its idle connections
	rlogger any  // go-retryablehttp's logger: nil (silent) or a LeveledLogger
}

// ErrNoRegistration is the error of a signed flush target when the
// Registration func returns no creation zxid (0): there is no registration
// a gateway could evict, so nothing is sent.
var ErrNoRegistration = errors.New("flush: no registration to flush (czxid 0, minimum 1)")

// NewNotifier returns a Notifier that asks gateways to evict self, signing
// its requests with secret (at least MinSecretLen bytes). Targets come from
// StaticTargets, Targets and SpringTargets; with none, Flush does nothing.
// StaticTargets and Targets need the Registration option.
func NewNotifier(self Self, secret []byte, opts ...NotifierOption) (*Notifier, error) {
	if self.Service == "" || self.ID == "" {
		return nil, fmt.Errorf("flush: instance needs a service and an id (got %q, %q)", self.Service, self.ID)
	}
	if err := checkSecret(secret); err != nil {
		return nil, err
	}
	o, err := newNotifierOptions(opts)
	if err != nil {
		return nil, err
	}
	if (len(o.static) > 0 || o.source != nil) && o.registration == nil {
		return nil, errors.New("flush: StaticTargets and Targets need the Registration option (signed flushes name the registration they end)")
	}
	n := &Notifier{self: self, secret: append([]byte(nil), secret...), opts: o, client: o.client}
	if n.client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		n.client = &http.Client{Transport: tr, Timeout: o.attemptTimeout}
		n.owned = true
	}
	if o.logger != nil {
		n.rlogger = o.logger.With("component", "retryablehttp")
	}
	return n, nil
}

// *slog.Logger serves as go-retryablehttp's logger as it is.
var _ retryablehttp.LeveledLogger = (*slog.Logger)(nil)

type flushTarget struct {
	url    string
	spring bool
}

func (n *Notifier) targets() []flushTarget {
	var ts []flushTarget
	seen := make(map[flushTarget]bool)
	add := func(u string, spring bool) {
		t := flushTarget{u, spring}
		if !seen[t] {
			seen[t] = true
			ts = append(ts, t)
		}
	}
	for _, u := range n.opts.static {
		add(u, false)
	}
	if n.opts.source != nil {
		for _, u := range n.opts.source.FlushTargets() {
			add(u, false)
		}
	}
	for _, u := range n.opts.spring {
		add(u, true)
	}
	return ts
}

// Flush calls every target in parallel and returns when each one acked or
// gave up: after the retries (each attempt signed afresh), or when ctx is
// done, which bounds every attempt and every backoff. A signed request's
// body is a Request naming self, the registration (the Registration
// func, asked once per Flush) and the target URL as the gateway's audience.
// Any 2xx is an acknowledgement, whatever its Result. It returns one report
// per target, in the order static, source, Spring targets, and the joined
// *TargetError of the targets that did not ack.
func (n *Notifier) Flush(ctx context.Context) ([]Report, error) {
	ts := n.targets()
	var czxid int64
	if n.opts.registration != nil {
		czxid = n.opts.registration()
	}
	reports := make([]Report, len(ts))
	var wg sync.WaitGroup
	for i, t := range ts {
		wg.Go(func() { reports[i] = n.flushOne(ctx, t, czxid) })
	}
	wg.Wait()
	if n.owned {
		n.client.CloseIdleConnections()
	}
	var errs []error
	for _, r := range reports {
		if !r.Acked {
			errs = append(errs, &TargetError{Target: r.Target, Attempts: r.Attempts, Err: r.Err})
		}
	}
	return reports, errors.Join(errs...)
}

func (n *Notifier) flushOne(ctx context.Context, t flushTarget, czxid int64) Report {
	begin := time.Now()
	rep := Report{Target: redact(t.url), Spring: t.spring}
	var resp *http.Response
	err := func() error {
		aud, err := Audience(t.url)
		if err != nil {
			return err
		}
		var req *retryablehttp.Request
		var body []byte
		if t.spring {
			req, err = retryablehttp.NewRequestWithContext(ctx, http.MethodGet, n.springURL(t.url), nil)
		} else {
			if czxid <= 0 {
				return ErrNoRegistration
			}
			body, err = json.Marshal(n.self.request(czxid, aud))
			if err != nil {
				return fmt.Errorf("flush: encode flush request: %w", err)
			}
			req, err = retryablehttp.NewRequestWithContext(ctx, http.MethodPost, t.url, body)
		}
		if err != nil {
			return err
		}
		if !t.spring {
			req.Header.Set("Content-Type", "application/json")
			signHeaders(req.Header, n.secret, body, time.Now())
		}
		c := &retryablehttp.Client{
			HTTPClient:   n.client,
			Logger:       n.rlogger,
			RetryWaitMin: n.opts.retryWaitMin,
			RetryWaitMax: n.opts.retryWaitMax,
			RetryMax:     n.opts.retryMax,
			CheckRetry:   retryablehttp.DefaultRetryPolicy,
			Backoff:      retryablehttp.DefaultBackoff,
			RequestLogHook: func(_ retryablehttp.Logger, _ *http.Request, i int) {
				rep.Attempts = i + 1
			},
			PrepareRetry: func(r *http.Request) error {
				if !t.spring {
					// The request is a shallow copy: do not touch the
					// header map the previous attempt may still read.
					r.Header = r.Header.Clone()
					signHeaders(r.Header, n.secret, body, time.Now())
				}
				return nil
			},
		}
		resp, err = c.Do(req)
		return err
	}()
	if err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			err = fmt.Errorf("status %s", resp.Status)
		} else if r := Result(resp.Header.Get(HeaderResult)); r.valid() {
			rep.Result = r
		}
	}
	rep.Duration = time.Since(begin)
	rep.Acked = err == nil
	rep.Err = err
	n.countCall(rep)
	if l := n.opts.logger; l != nil {
		if err != nil {
			l.Warn("flush not acknowledged", "target", rep.Target, "instance", n.self.ID, "attempts", rep.Attempts, "err", err)
		} else {
			l.Debug("flush acknowledged", "target", rep.Target, "instance", n.self.ID, "result", rep.Result, "attempts", rep.Attempts, "duration", rep.Duration)
		}
	}
	return rep
}

func (n *Notifier) springURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw // checked before
	}
	q := u.Query()
	q.Set("applicationName", n.self.Service)
	q.Set("host", n.self.Address)
	q.Set("id", n.self.ID)
	u.RawQuery = q.Encode()
	return u.String()
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("flush: invalid flush URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("flush: invalid flush URL %q (need an absolute http or https URL)", u.Redacted())
	}
	return nil
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<invalid URL>"
	}
	return u.Redacted()
}
