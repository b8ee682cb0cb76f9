package endpoint_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"testing"

	"github.com/gracekit/gracekit/endpoint"
)

// A POST with an Idempotency-Key header on a reused connection that breaks
// after the request was written is replayed by net/http on a new
// connection; when that dial is refused (the provider crashed), the error
// must not be NotSent: the provider may have run the order.
func TestARequestWrittenBeforeARefusedReplayIsNeverNotSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		// First request: a GET, answered, keeping the connection alive.
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
		// Second: the POST is read (the order runs), then the process "crashes".
		if req, err = http.ReadRequest(r); err == nil {
			_, _ = io.Copy(io.Discard, req.Body)
		}
		ln.Close() // the replay's dial is refused
	}()

	get, err := endpoint.NewHTTPFactory(http.MethodGet, "/", encodeNothing, decodeStatus)
	if err != nil {
		t.Fatal(err)
	}
	post, err := endpoint.NewHTTPFactory(http.MethodPost, "/orders", encodeOrder, decodeStatus,
		endpoint.WithTransport(get.Transport()))
	if err != nil {
		t.Fatal(err)
	}
	defer get.Close()
	instance := ln.Addr().String()
	g, _, _ := get.Factory(instance)
	if _, err := g(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	p, _, _ := post.Factory(instance)
	reused := false
	ctx := httptrace.WithClientTrace(endpoint.NonIdempotent(context.Background()), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { reused = reused || i.Reused },
	})
	_, err = p(ctx, nil)
	if !reused {
		t.Fatal("the POST did not go over the reused connection: the test does not test the replay")
	}
	<-served
	if err == nil {
		t.Fatal("the POST succeeded against a crashed provider")
	}
	if c := endpoint.Classify(err); c == endpoint.NotSent {
		t.Fatalf("Classify(%v) = NotSent: a retry would run the order twice", err)
	}
}

func encodeNothing(context.Context, *http.Request, any) error { return nil }

func encodeOrder(_ context.Context, r *http.Request, _ any) error {
	body := []byte(`{"symbol":"ABC","qty":1}`)
	r.Header.Set("Idempotency-Key", "order-1")
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.ContentLength = int64(len(body))
	return nil
}

func decodeStatus(_ context.Context, r *http.Response) (any, error) {
	_, _ = io.Copy(io.Discard, r.Body) // so that the connection is reused
	return r.StatusCode, nil
}
