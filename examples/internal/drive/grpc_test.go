package drive

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestWaitGRPCReadyWaitsForServing(t *testing.T) {
	s := NewSupervisor()
	defer s.KillAll()
	p, err := s.Start("child", "/bin/sh", []string{"-c", "exec sleep 30"}, nil, filepath.Join(t.TempDir(), "child.log"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // not listening yet: the first checks are refused

	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan struct{})
	defer func() { srv.Stop(); <-done }()
	go func() {
		defer close(done)
		time.Sleep(200 * time.Millisecond)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		time.AfterFunc(200*time.Millisecond, func() { hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING) })
		_ = srv.Serve(ln)
	}()
	if err := WaitGRPCReady(context.Background(), "child", p, addr, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if st, _ := hs.Check(context.Background(), &healthpb.HealthCheckRequest{}); st.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("returned while %v", st.GetStatus())
	}

	// A child that exited is not waited for.
	p.Stop(syscall.SIGTERM, 5*time.Second)
	if err := WaitGRPCReady(context.Background(), "child", p, "127.0.0.1:1", 20*time.Second); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("WaitGRPCReady on an exited child: %v", err)
	}
}
