package drive

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// WaitGRPCReady calls the standard health service's Check (the whole
// server, service "") at addr every 50 ms until it answers SERVING, the
// gRPC counterpart of WaitReady, which it fails like.
func WaitGRPCReady(ctx context.Context, id string, p *Proc, addr string, limit time.Duration) error {
	// A short reconnect backoff: the child may not listen yet, and grpc-go
	// would wait a second before trying again.
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.2, MaxDelay: 100 * time.Millisecond},
			MinConnectTimeout: time.Second}))
	if err != nil {
		return err
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	deadline := time.Now().Add(limit)
	last := "no answer"
	for {
		if p.Exited() {
			return fmt.Errorf("%s exited (%s) before it was ready; its log %s ends with:\n%s",
				id, p.ExitString(), p.LogPath(), Tail(p.LogPath(), 15))
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		switch {
		case err != nil:
			last = err.Error()
		case resp.GetStatus() == healthpb.HealthCheckResponse_SERVING:
			return nil
		default:
			last = resp.GetStatus().String()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: gRPC health not SERVING within %v (last: %s); its log %s ends with:\n%s",
				id, limit, last, p.LogPath(), Tail(p.LogPath(), 15))
		}
		if err := SleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}
