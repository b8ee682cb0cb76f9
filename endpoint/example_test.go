package endpoint_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitsd "github.com/go-kit/kit/sd"

	"github.com/gracekit/gracekit/endpoint"
)

// factory answers with the instance's name.
func factory(instance string) (kitendpoint.Endpoint, io.Closer, error) {
	return func(context.Context, any) (any, error) { return "hello from " + instance, nil }, nil, nil
}

// The chain: Instancer → Factory → Endpointer → Balancer → Retry.
func ExampleNewEndpointer() {
	src := kitsd.FixedInstancer{"10.0.0.1:8080", "10.0.0.2:8080"}
	e, err := endpoint.NewEndpointer(src, factory)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	rr, err := endpoint.NewRoundRobin(e)
	if err != nil {
		fmt.Println(err)
		return
	}
	call, err := endpoint.NewRetry(rr, endpoint.Attempts(3))
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		resp, err := call(context.Background(), nil)
		fmt.Println(resp, err)
	}
	// Output:
	// hello from 10.0.0.1:8080 <nil>
	// hello from 10.0.0.2:8080 <nil>
	// hello from 10.0.0.1:8080 <nil>
}

// A gateway's flush handler evicts a stopping provider at once.
func ExampleEndpointer_Evict() {
	e, err := endpoint.NewEndpointer(kitsd.FixedInstancer{"10.0.0.1:8080", "10.0.0.2:8080"}, factory)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	e.Evict("10.0.0.1:8080")
	fmt.Println(e.Instances())
	// Output:
	// [10.0.0.2:8080]
}

// Calls with the same sticky key go to the same instance.
func ExampleNewSticky() {
	src := kitsd.FixedInstancer{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"}
	e, err := endpoint.NewEndpointer(src, factory)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	st, err := endpoint.NewSticky(e)
	if err != nil {
		fmt.Println(err)
		return
	}
	call, err := endpoint.NewRetry(st)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := endpoint.WithStickyKey(context.Background(), "session-42")
	first, _ := call(ctx, nil)
	second, _ := call(ctx, nil)
	fmt.Println(first == second)
	// Output:
	// true
}

// HTTPFactory builds go-kit HTTP clients sharing one transport.
func ExampleNewHTTPFactory() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "pong")
	}))
	defer srv.Close()

	f, err := endpoint.NewHTTPFactory(http.MethodGet, "/ping",
		func(context.Context, *http.Request, any) error { return nil },
		func(_ context.Context, resp *http.Response) (any, error) {
			b, err := io.ReadAll(resp.Body)
			return string(b), err
		})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	e, err := endpoint.NewEndpointer(kitsd.FixedInstancer{strings.TrimPrefix(srv.URL, "http://")}, f.Factory)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	p2c, _ := endpoint.NewP2C(e)
	call, _ := endpoint.NewRetry(p2c)
	resp, err := call(context.Background(), nil)
	fmt.Println(resp, err)
	// Output:
	// pong <nil>
}
