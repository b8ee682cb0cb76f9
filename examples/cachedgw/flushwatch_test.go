package main

import (
	"context"
	"net/http"
	"sync/atomic"
)

// flushWatch stands in front of a gateway and tells the requests it routed
// before it answered the flush of one instance from those it routed after:
// "0 requests after the flush was acknowledged" counts only the second
// kind, which a snapshot of the provider's counter taken when its health
// flips cannot tell apart (a request routed just before the flush may be
// served just after it).
type flushWatch struct {
	id      string      // the instance whose flush is watched
	armed   atomic.Bool // a flush of id from now on is the one watched
	flushed atomic.Bool // the gateway answered it
	before  atomic.Int64
	late    atomic.Int64
}

// afterFlushKey marks, in a forwarded request's ctx, that it reached the
// gateway once the watched flush had been answered.
type afterFlushKey struct{}

func (f *flushWatch) handler(gw http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/flushCache" {
			gw.ServeHTTP(w, r)
			if f.armed.Load() && r.URL.Query().Get("id") == f.id {
				f.flushed.Store(true) // answered
			}
			return
		}
		after := f.flushed.Load()
		if !after {
			f.before.Add(1)
			defer f.before.Add(-1)
		}
		gw.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), afterFlushKey{}, after)))
	})
}

// transport counts the calls to addr of requests routed after the flush.
func (f *flushWatch) transport(rt http.RoundTripper, addr string) http.RoundTripper {
	return lateTransport{rt, addr, &f.late}
}

// inFlightBefore is the number of requests routed before the flush that
// are still being served.
func (f *flushWatch) inFlightBefore() int64 { return f.before.Load() }

type lateTransport struct {
	http.RoundTripper
	addr string
	late *atomic.Int64
}

func (t lateTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if after, _ := r.Context().Value(afterFlushKey{}).(bool); after && r.URL.Host == t.addr {
		t.late.Add(1)
	}
	return t.RoundTripper.RoundTrip(r)
}

func (t lateTransport) CloseIdleConnections() {
	t.RoundTripper.(interface{ CloseIdleConnections() }).CloseIdleConnections()
}
