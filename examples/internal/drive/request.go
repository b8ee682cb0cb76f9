package drive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// HeaderIdempotencyKey carries the key every POST /api/orders of the load
// has (examples/CONTRACT.md, "Orders and the ledger").
const HeaderIdempotencyKey = "Idempotency-Key"

// Symbols are the symbols the load asks quotes and orders for.
var Symbols = []string{"ABC", "GKIT", "ZOO", "FX", "QTE"}

// IsPost tells whether the n-th request (from 1) is a POST /api/orders:
// one in five, so 20% of the load is non-idempotent.
func IsPost(n int64) bool { return n%5 == 0 }

// NewClient returns the load's HTTP client for workers concurrent
// requests to loopback gateways, each bounded by timeout. Close its idle
// connections with CloseIdleConnections once the load has stopped.
func NewClient(workers int, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:               nil, // loopback only
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConns:        2 * workers,
		MaxIdleConnsPerHost: workers,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// NewRequest is the n-th request of a load through the gateway at base
// ("http://127.0.0.1:port"): with a key, POST /api/orders of sym with that
// Idempotency-Key; without, GET /api/quote of sym.
func NewRequest(ctx context.Context, base string, n int64, sym, key string) (*http.Request, error) {
	if key == "" {
		return http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/quote?symbol="+sym, nil)
	}
	body := fmt.Sprintf(`{"symbol":%q,"qty":%d}`, sym, 1+n%9)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/orders", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderIdempotencyKey, key)
	return req, nil
}

// Do sends req with client and reads up to 64 KiB of the answer, closing
// its body. err is the client's error (no answer); readErr the error that
// cut the body short.
func Do(client *http.Client, req *http.Request) (status int, body []byte, readErr, err error) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	body, readErr = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, body, readErr, nil
}

// InstanceOf returns the "instance" field of a JSON answer, or "".
func InstanceOf(body []byte) string {
	var v struct {
		Instance string `json:"instance"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	return v.Instance
}

// ErrorOf returns the "error" field of a JSON error body, or the body.
func ErrorOf(body []byte) string {
	var v struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &v) != nil || v.Error == "" {
		return string(body)
	}
	return v.Error
}

// UpstreamOf returns the "upstream" field of a JSON error body, or "".
func UpstreamOf(body []byte) string {
	var v struct {
		Upstream string `json:"upstream"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	return v.Upstream
}

// TransportReason is a client error without its method and URL:
// "timeout" for a timeout.
func TransportReason(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return "timeout"
		}
		err = ue.Err
	}
	return err.Error()
}

// Shorten folds white space and cuts s to n bytes, marking the cut with
// "…".
func Shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
