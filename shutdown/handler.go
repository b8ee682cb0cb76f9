package shutdown

import (
	"context"
	"crypto/hmac"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Evicter removes an instance from a gateway's local view of its service.
// Evict must be idempotent, honor ctx, and return only once the eviction is
// visible to the endpointer (no new call picks the instance).
type Evicter interface {
	Evict(ctx context.Context, inst Instance) error
}

// EvicterFunc adapts a func to Evicter.
type EvicterFunc func(ctx context.Context, inst Instance) error

// Evict calls f.
func (f EvicterFunc) Evict(ctx context.Context, inst Instance) error { return f(ctx, inst) }

// EvicterLookup returns the Evicter of a service, and false if the gateway
// does not know the service. It must not block.
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
// an Instance as JSON:
//
//   - 405 for another method;
//   - 413 for a body over MaxBodyBytes;
//   - 401 when the signature headers are missing or malformed, the signature
//     is wrong, the timestamp is outside TimestampWindow, or the nonce was
//     seen before (a replay);
//   - 400 for a body that is not a valid Instance;
//   - 404 for a service the lookup does not know;
//   - 500 when Evict failed (the notifier retries);
//   - 200 once Evict returned.
//
// Only the 200 evicts anything. Valid repeats with fresh nonces evict again.
type Handler struct {
	secret []byte
	lookup EvicterLookup
	opts   *options
	nonces *nonceCache
	now    func() time.Time
}

// NewHandler returns a Handler that verifies requests with secret (at least
// MinSecretLen bytes) and evicts through lookup.
func NewHandler(secret []byte, lookup EvicterLookup, opts ...Option) (*Handler, error) {
	if err := checkSecret(secret); err != nil {
		return nil, err
	}
	if lookup == nil {
		return nil, errors.New("shutdown: nil evicter lookup")
	}
	o, err := newOptions(forHandler, opts)
	if err != nil {
		return nil, err
	}
	return &Handler{
		secret: append([]byte(nil), secret...),
		lookup: lookup,
		opts:   o,
		nonces: newNonceCache(o.nonceSize),
		now:    time.Now,
	}, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.refuse(w, r, http.StatusMethodNotAllowed, "method not allowed", nil)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.refuse(w, r, http.StatusRequestEntityTooLarge, "body too large", err)
			return
		}
		h.refuse(w, r, http.StatusBadRequest, "unreadable body", err)
		return
	}
	if err := h.verify(r.Header, body); err != nil {
		h.refuse(w, r, http.StatusUnauthorized, "unauthorized", err)
		return
	}
	var inst Instance
	if err := json.Unmarshal(body, &inst); err != nil || inst.Service == "" || inst.ID == "" {
		if err == nil {
			err = errors.New("missing service or id")
		}
		h.refuse(w, r, http.StatusBadRequest, "malformed body", err)
		return
	}
	ev, ok := h.lookup(inst.Service)
	if !ok {
		h.refuse(w, r, http.StatusNotFound, "unknown service", nil)
		return
	}
	if err := ev.Evict(r.Context(), inst); err != nil {
		h.refuse(w, r, http.StatusInternalServerError, "eviction failed", err)
		return
	}
	if l := h.opts.logger; l != nil {
		l.Info("flush: instance evicted", "service", inst.Service, "instance", inst.ID)
	}
	writeText(w, http.StatusOK, "evicted")
}

func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, code int, msg string, err error) {
	if l := h.opts.logger; l != nil {
		l.LogAttrs(r.Context(), slog.LevelWarn, "flush refused",
			slog.Int("status", code), slog.String("reason", msg), slog.String("remote", r.RemoteAddr), slog.Any("err", err))
	}
	writeText(w, code, msg)
}

// verify checks the signature headers against body and records the nonce.
func (h *Handler) verify(hd http.Header, body []byte) error {
	ts, nonce, sig := hd.Get(HeaderTimestamp), hd.Get(HeaderNonce), hd.Get(HeaderSignature)
	if ts == "" || nonce == "" || sig == "" {
		return errors.New("unsigned request")
	}
	if len(nonce) > 128 {
		return errors.New("nonce too long")
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return errors.New("malformed signature")
	}
	want, _ := hex.DecodeString(Sign(h.secret, ts, nonce, body))
	if !hmac.Equal(got, want) {
		return errors.New("forged signature")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("malformed timestamp")
	}
	now := h.now()
	at := time.Unix(sec, 0)
	if d := now.Sub(at); d > h.opts.window || d < -h.opts.window {
		return fmt.Errorf("stale timestamp (%s off, window %s)", d.Round(time.Second), h.opts.window)
	}
	if !h.nonces.add(nonce, sec, now.Add(-h.opts.window).Unix()) {
		return errors.New("replayed nonce")
	}
	return nil
}

// nonceCache remembers recent nonces, at most size of them, so that a
// replay inside the timestamp window is refused. When full, it forgets the
// oldest nonce still inside the window and raises floor to its timestamp:
// from then on, requests stamped at or before floor are refused, so
// forgetting a nonce never lets its replay through.
type nonceCache struct {
	mu    sync.Mutex
	size  int
	seen  map[string]int64 // nonce → timestamp
	order []string         // insertion order, a FIFO
	floor int64
}

func newNonceCache(size int) *nonceCache {
	return &nonceCache{size: size, seen: make(map[string]int64, size)}
}

// add records nonce stamped ts and reports whether it is new. Entries
// stamped before oldest are outside the window and may be forgotten.
func (c *nonceCache) add(nonce string, ts, oldest int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ts <= c.floor {
		return false
	}
	if _, ok := c.seen[nonce]; ok {
		return false
	}
	for len(c.order) > 0 && (c.seen[c.order[0]] < oldest || len(c.order) >= c.size) {
		old := c.order[0]
		if t := c.seen[old]; t >= oldest && t > c.floor {
			c.floor = t
		}
		delete(c.seen, old)
		c.order = c.order[1:]
	}
	if ts <= c.floor {
		return false
	}
	c.seen[nonce] = ts
	c.order = append(c.order, nonce)
	return true
}
