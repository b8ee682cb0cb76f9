package flush

import (
	"context"
	"crypto/hmac"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Refusal reasons, the "reason" label of the RefusalCounter.
const (
	ReasonMethod      = "method"       // 405: not a POST
	ReasonContentType = "content-type" // 415: not application/json
	ReasonTooLarge    = "too-large"    // 413: body over MaxBodyBytes
	ReasonUnreadable  = "unreadable"   // 400: the body could not be read
	ReasonUnsigned    = "unsigned"     // 401: signature headers missing or malformed
	ReasonForged      = "forged"       // 401: wrong signature
	ReasonStale       = "stale"        // 401: timestamp outside TimestampWindow
	ReasonAudience    = "audience"     // 401: target is not one of the handler's audiences
	ReasonReplay      = "replay"       // 401: nonce seen before
	ReasonMalformed   = "malformed"    // 400: body is not a valid Request
	ReasonEvictFailed = "evict-failed" // 500: the Evicter returned an error
)

// Evicter removes an instance from a gateway's local view of its service.
// Evict must be idempotent, honor ctx, and return only once the eviction is
// visible to the endpointer (no new call picks the instance). It must evict
// only the registration req names (req.Czxid; 0 names any) and only if the
// gateway lists it, and say what it did: Evicted, or NotListed or
// OtherRegistration when it changed nothing. An error means it could not
// tell; the Handler answers 500 and the notifier retries.
type Evicter interface {
	Evict(ctx context.Context, req Request) (Result, error)
}

// EvicterFunc adapts a func to Evicter.
type EvicterFunc func(ctx context.Context, req Request) (Result, error)

// Evict calls f.
func (f EvicterFunc) Evict(ctx context.Context, req Request) (Result, error) { return f(ctx, req) }

// EvicterLookup returns the Evicter of a service, and false if the gateway
// does not route the service. It must not block.
type EvicterLookup func(service string) (Evicter, bool)

// EvicterMap returns an EvicterLookup over a fixed map, which it copies.
func EvicterMap(m map[string]Evicter) EvicterLookup {
	c := make(map[string]Evicter, len(m))
	for k, v := range m {
		c[k] = v
	}
	return func(service string) (Evicter, bool) {
		e, ok := c[service]
		return e, ok
	}
}

// Handler is the gateway's flush endpoint. It answers a POST whose body is
// a Request as JSON, checking in this order:
//
//   - 405 for another method;
//   - 415 for a Content-Type other than application/json (parameters
//     allowed), before reading the body;
//   - 413 for a body over MaxBodyBytes;
//   - 401 when the signature headers are missing or malformed, the signature
//     is wrong, or the timestamp is outside TimestampWindow;
//   - 400 for a body that is not a Request with a service, an id and a
//     czxid;
//   - 401 when the request's target is not one of the handler's audiences,
//     or its nonce was seen before (a replay);
//   - 500 when Evict failed (the notifier retries);
//   - 200 with HeaderResult "evicted" once Evict evicted the registration;
//   - 202 with HeaderResult "not-listed", "other-registration" or
//     "not-routed" when nothing was evicted because the gateway does not list
//     that id, lists another registration of it, or does not route the
//     service. These are acknowledgements: the notifier stops retrying.
//
// Only a 200 evicts anything. Valid repeats with fresh nonces evict again,
// which changes nothing. Refusals are counted (RefusalCounter) and logged at
// most once per reason per second.
type Handler struct {
	secret    []byte
	audiences map[string]bool
	lookup    EvicterLookup
	opts      *handlerOptions
	nonces    *nonceCache
	logs      refusalLog
	now       func() time.Time
}

// NewHandler returns a Handler that verifies requests with secret (at least
// MinSecretLen bytes), accepts only requests whose target is one of
// audiences, and evicts through lookup. audiences are the flush URLs that
// notifiers call this handler at (for a gateway registered in ZooKeeper,
// the URL its flush path is discovered at; plus any static URL, such as a
// load balancer's, that providers are configured with), each an absolute
// http or https URL, compared in the form Audience returns.
func NewHandler(secret []byte, audiences []string, lookup EvicterLookup, opts ...HandlerOption) (*Handler, error) {
	if err := checkSecret(secret); err != nil {
		return nil, err
	}
	if len(audiences) == 0 {
		return nil, errors.New("flush: 0 audiences (minimum 1: the flush URLs the handler answers at)")
	}
	auds := make(map[string]bool, len(audiences))
	for _, a := range audiences {
		c, err := Audience(a)
		if err != nil {
			return nil, err
		}
		auds[c] = true
	}
	if lookup == nil {
		return nil, errors.New("flush: nil evicter lookup")
	}
	o, err := newHandlerOptions(opts)
	if err != nil {
		return nil, err
	}
	return &Handler{
		secret:    append([]byte(nil), secret...),
		audiences: auds,
		lookup:    lookup,
		opts:      o,
		nonces:    newNonceCache(o.nonceSize),
		logs:      refusalLog{last: map[string]refusalEntry{}},
		now:       time.Now,
	}, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.refuse(w, r, http.StatusMethodNotAllowed, ReasonMethod, nil)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		h.refuse(w, r, http.StatusUnsupportedMediaType, ReasonContentType,
			fmt.Errorf("content type %q (want application/json)", r.Header.Get("Content-Type")))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.refuse(w, r, http.StatusRequestEntityTooLarge, ReasonTooLarge, err)
			return
		}
		h.refuse(w, r, http.StatusBadRequest, ReasonUnreadable, err)
		return
	}
	now := h.now()
	ts, nonce, reason, err := h.verify(r.Header, body, now)
	if err != nil {
		h.refuse(w, r, http.StatusUnauthorized, reason, err)
		return
	}
	req, err := parseRequest(body)
	if err != nil {
		h.refuse(w, r, http.StatusBadRequest, ReasonMalformed, err)
		return
	}
	if !h.audiences[req.Target] {
		h.refuse(w, r, http.StatusUnauthorized, ReasonAudience, fmt.Errorf("target %q is not this handler's", req.Target))
		return
	}
	// Last, so that no refused request takes a place in the cache.
	if !h.nonces.add(nonce, ts, now.Add(-h.opts.window).Unix()) {
		h.refuse(w, r, http.StatusUnauthorized, ReasonReplay, errors.New("replayed nonce"))
		return
	}
	res := NotRouted
	if ev, ok := h.lookup(req.Service); ok {
		res, err = ev.Evict(r.Context(), req)
		if err == nil && !res.valid() {
			err = fmt.Errorf("flush: evicter returned result %q (want evicted, not-listed or other-registration)", res)
		}
		if err != nil {
			h.refuse(w, r, http.StatusInternalServerError, ReasonEvictFailed, err)
			return
		}
	}
	if c := h.opts.results; c != nil {
		c.With("result", string(res)).Add(1)
	}
	if l := h.opts.logger; l != nil {
		// Valid flushes come in volume too (a fleet's rolling restart, or a
		// signer gone wrong): one line per result a second, as refusals.
		if ok, suppressed := h.logs.admit("result:"+string(res), h.now()); ok {
			l.Info("flush: "+string(res), "service", req.Service, "instance", req.ID, "czxid", req.Czxid, "suppressed", suppressed)
		}
	}
	w.Header().Set(HeaderResult, string(res))
	writeText(w, res.status(), string(res))
}

// parseRequest decodes a signed body.
func parseRequest(body []byte) (Request, error) {
	var req Request
	if err := json.Unmarshal(body, &req); err != nil {
		return Request{}, err
	}
	switch {
	case req.Service == "" || req.ID == "":
		return Request{}, errors.New("missing service or id")
	case req.Czxid <= 0:
		return Request{}, fmt.Errorf("czxid %d (minimum 1: the registration the flush ends)", req.Czxid)
	}
	return req, nil
}

// refuse answers code, counts the refusal and logs it unless a line for
// the same reason was written less than a second ago.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, code int, reason string, err error) {
	if c := h.opts.refusals; c != nil {
		c.With("reason", reason).Add(1)
	}
	if l := h.opts.logger; l != nil {
		if ok, suppressed := h.logs.admit(reason, h.now()); ok {
			l.LogAttrs(r.Context(), slog.LevelWarn, "flush refused",
				slog.Int("status", code), slog.String("reason", reason), slog.String("remote", r.RemoteAddr),
				slog.Any("err", err), slog.Int64("suppressed", suppressed))
		}
	}
	writeText(w, code, http.StatusText(code))
}

// verify checks the signature headers against body and returns the
// request's timestamp and nonce, or the refusal reason.
func (h *Handler) verify(hd http.Header, body []byte, now time.Time) (ts int64, nonce, reason string, err error) {
	sts, nonce, sig := hd.Get(HeaderTimestamp), hd.Get(HeaderNonce), hd.Get(HeaderSignature)
	if sts == "" || nonce == "" || sig == "" {
		return 0, "", ReasonUnsigned, errors.New("unsigned request")
	}
	if len(nonce) > 128 {
		return 0, "", ReasonUnsigned, fmt.Errorf("nonce of %d bytes (maximum 128)", len(nonce))
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return 0, "", ReasonUnsigned, errors.New("malformed signature")
	}
	want, _ := hex.DecodeString(Sign(h.secret, sts, nonce, body))
	if !hmac.Equal(got, want) {
		return 0, "", ReasonForged, errors.New("forged signature")
	}
	ts, err = strconv.ParseInt(sts, 10, 64)
	if err != nil {
		return 0, "", ReasonUnsigned, errors.New("malformed timestamp")
	}
	if d := now.Sub(time.Unix(ts, 0)); d > h.opts.window || d < -h.opts.window {
		return 0, "", ReasonStale, fmt.Errorf("stale timestamp (%s off, window %s)", d.Round(time.Second), h.opts.window)
	}
	return ts, nonce, "", nil
}

// refusalLog admits at most one log line per reason (a refusal's, or an
// accepted flush's result) per second.
// It is hand-written rather than a golang.org/x/time/rate.Limiter per
// reason because each line reports how many refusals of its reason went
// unlogged since the previous line, which a Limiter does not count. The
// reasons and results are fixed sets, so its memory is bounded.
type refusalLog struct {
	mu   sync.Mutex
	last map[string]refusalEntry
}

type refusalEntry struct {
	at         time.Time
	suppressed int64
}

// admit reports whether a line for reason may be written at now, and how
// many were suppressed since the last one.
func (l *refusalLog) admit(reason string, now time.Time) (bool, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.last[reason]
	if ok && now.Sub(e.at) < time.Second && now.Sub(e.at) > -time.Second {
		e.suppressed++
		l.last[reason] = e
		return false, 0
	}
	l.last[reason] = refusalEntry{at: now}
	return true, e.suppressed
}

// nonceCache remembers recent nonces, at most size of them, so that a
// replay inside the timestamp window is refused. When full it forgets the
// oldest nonce, even one still inside the window, so that no volume of
// valid flushes ever makes it refuse one. The replay of a forgotten nonce
// is then accepted, which is harmless: a signed request names this gateway
// (its target) and the registration that is stopping (its czxid), so its
// replay can only evict that registration again, an idempotent no-op.
type nonceCache struct {
	mu   sync.Mutex
	seen map[string]int64 // nonce → timestamp
	ring []string         // FIFO of the nonces in seen, oldest at head
	head int
	n    int
}

func newNonceCache(size int) *nonceCache {
	return &nonceCache{seen: make(map[string]int64, size), ring: make([]string, size)}
}

// add records nonce stamped ts and reports whether it is new. Entries
// stamped before oldest are outside the window and are forgotten first.
func (c *nonceCache) add(nonce string, ts, oldest int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.n > 0 && c.seen[c.ring[c.head]] < oldest {
		c.pop()
	}
	if _, ok := c.seen[nonce]; ok {
		return false
	}
	if c.n == len(c.ring) {
		c.pop()
	}
	c.ring[(c.head+c.n)%len(c.ring)] = nonce
	c.n++
	c.seen[nonce] = ts
	return true
}

func (c *nonceCache) pop() {
	delete(c.seen, c.ring[c.head])
	c.ring[c.head] = ""
	c.head = (c.head + 1) % len(c.ring)
	c.n--
}

func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(msg + "\n"))
}
