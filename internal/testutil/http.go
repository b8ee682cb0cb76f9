package testutil

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// DownURL returns a URL where nothing listens: a gateway that is down.
func DownURL(tb testing.TB) string {
	tb.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL + "/flush"
	srv.Close()
	return u
}

// SlowServer starts a server that never answers until the caller gives up;
// it is closed when the test ends.
func SlowServer(tb testing.TB) *httptest.Server {
	tb.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // lets the server notice a closed connection
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	tb.Cleanup(srv.Close)
	tb.Cleanup(func() { close(release) }) // runs first
	return srv
}

// Do sends req on a connection it closes, so that no idle connection is
// left for goleak, and returns the response with its body closed.
func Do(tb testing.TB, req *http.Request) *http.Response {
	tb.Helper()
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp
}
