package provider_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/lifecycle"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
)

// A Stop during a Start that waits for a ZooKeeper that never answers
// cancels it: Stop returns within its ctx, and Start returns with it
// rather than at the connect timeout.
func TestAStopDuringAStartCancelsTheConnect(t *testing.T) {
	t.Parallel()
	sess, err := sd.NewSession(testutil.FrozenServer(t), sd.ConnectTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	p, err := provider.New(sess, provider.Config{
		Instance: sd.Instance{Name: "quote", Address: "127.0.0.1", Port: testutil.FreePort(t)},
		Server:   &http.Server{ReadHeaderTimeout: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- p.Start(context.Background()) }()
	testutil.WaitFor(t, "the Start to wait on ZooKeeper", func() bool { return p.State() == lifecycle.StateStarting })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop during Start: %v (it waited out its ctx)", err)
	}
	select {
	case err := <-started:
		if err == nil {
			t.Fatal("Start succeeded against a server that never answers")
		}
		t.Logf("Start: %v", err)
	case <-ctx.Done():
		t.Fatal("Start outlived the Stop")
	}
}
