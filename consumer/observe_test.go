package consumer_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	kitendpoint "github.com/go-kit/kit/endpoint"
	kitlb "github.com/go-kit/kit/sd/lb"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/endpoint"
	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/sd"
)

// Issue 39, item 6, against a real ZooKeeper: a consumer says at info when
// a service's instances come and go, and a call with no instance to pick
// names the service and says whether none is registered or none is UP,
// still matching go-kit's lb.ErrNoEndpoints.
func TestAConsumerSaysWhenInstancesComeAndGoAndWhyNoneIsThere(t *testing.T) {
	t.Parallel()
	zkc, base := sharedZK(t)
	cl, err := sd.NewClient(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sess, err := sd.NewSession(zkc.ConnectString())
	if err != nil {
		t.Fatal(err)
	}
	logs, log := testutil.NewLogs()
	c, err := consumer.New(sess, consumer.WithLogger(log), consumer.WithInstancerOptions(sd.BasePath(base)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop(ctx) }()
	factory := func(instance string) (kitendpoint.Endpoint, io.Closer, error) {
		return func(context.Context, any) (any, error) { return instance, nil }, nil, nil
	}
	call, err := c.Endpoint(ctx, "quote", factory, consumer.WithRetry(endpoint.Attempts(1)))
	if err != nil {
		t.Fatal(err)
	}
	says := func(what, want string) {
		t.Helper()
		var last error
		testutil.WaitFor(t, what, func() bool {
			_, last = call(ctx, nil)
			return last != nil && strings.Contains(last.Error(), want)
		})
		var ne *endpoint.NoEndpointsError
		if !errors.Is(last, kitlb.ErrNoEndpoints) || !errors.As(last, &ne) || ne.Service != "quote" {
			t.Fatalf("%s: %v, want a *endpoint.NoEndpointsError for quote that is lb.ErrNoEndpoints", what, last)
		}
	}
	line := func(what string, want map[string]string) {
		t.Helper()
		testutil.WaitFor(t, what, func() bool {
			for _, l := range logs.Messages("instances changed") {
				match := true
				for k, v := range want {
					match = match && l.Attrs[k] == v
				}
				if match {
					return true
				}
			}
			return false
		})
	}

	line("the first load's line", map[string]string{"service": "quote", "count": "0"})
	says("a call before any registration", `no endpoints available for service "quote": no instance is registered`)

	r, err := sd.NewRegistrar(cl, sd.Instance{Name: "quote", ID: "a", Address: "127.0.0.1", Port: 4001}, sd.BasePath(base))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterContext(ctx); err != nil {
		t.Fatal(err)
	}
	line("a line for the registration", map[string]string{"service": "quote", "count": "1", "added": "127.0.0.1:4001", "removed": ""})

	if err := r.SetStatus(ctx, sd.StatusOutOfService); err != nil {
		t.Fatal(err)
	}
	line("a line for the instance out of service", map[string]string{"service": "quote", "count": "0", "added": "", "removed": "127.0.0.1:4001"})
	says("a call with the only instance out of service", `no endpoints available for service "quote": 1 instance registered, none UP`)

	if err := r.DeregisterContext(ctx); err != nil {
		t.Fatal(err)
	}
	says("a call after the deregistration", `no endpoints available for service "quote": no instance is registered`)
}
