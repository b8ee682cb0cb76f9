package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gracekit/gracekit/examples/internal/drive"
	"github.com/gracekit/gracekit/examples/internal/history"
)

// readyProbe asks one provider whether it is ready: GET /readyz (200),
// or its gRPC health service (SERVING). No answer is not ready.
type readyProbe struct {
	in     *instance
	client *http.Client
	cc     *grpc.ClientConn
}

func newReadyProbe(in *instance) (*readyProbe, error) {
	p := &readyProbe{in: in, client: &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{Proxy: nil}}}
	if in.grpc {
		cc, err := grpc.NewClient("passthrough:///"+in.addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		p.cc = cc
	}
	return p, nil
}

func (p *readyProbe) ready(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if p.cc != nil {
		resp, err := healthpb.NewHealthClient(p.cc).Check(cctx, &healthpb.HealthCheckRequest{})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, p.in.url("/readyz"), nil)
	if err != nil {
		return false
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (p *readyProbe) close() {
	p.client.CloseIdleConnections()
	if p.cc != nil {
		_ = p.cc.Close()
	}
}

// sample records one answer of the probe for the drained node path.
func (p *readyProbe) sample(ctx context.Context, rs *robustState, path string) bool {
	ok := p.ready(ctx)
	rs.mu.Lock()
	rs.ready = append(rs.ready, history.ReadySample{ID: p.in.id, Path: path, At: time.Now(), Ready: ok})
	rs.mu.Unlock()
	return ok
}

// faultDrainSick makes a provider's health check fail, waits until it is
// not ready, drains it as an operator would, and makes the check pass
// again while the drain holds: the recovery must leave it unready, the
// drain being the operator's. Its readiness is sampled from the drain
// until the undrain, st.For after the recovery (drain-held).
func (d *driver) faultDrainSick(ctx context.Context, rs *robustState, st step, round int) error {
	g := d.groups[st.Group%len(d.groups)]
	p := g.providers[st.Slot%len(g.providers)]
	path := d.nodePaths(g)[p.id]
	probe, err := newReadyProbe(p)
	if err != nil {
		return err
	}
	defer probe.close()
	f := p.vars["PROVIDER_HEALTH_FILE"]
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		return err
	}
	sick := history.Sick{Service: p.service, ID: p.id, Path: path, From: time.Now(), Detect: healthDetect, ZKFault: rs.ensembleFaultIn(round)}
	well := func() error {
		sick.To = time.Now()
		rs.mu.Lock()
		rs.sick = append(rs.sick, sick)
		rs.mu.Unlock()
		return os.Remove(f)
	}
	for deadline := time.Now().Add(2 * healthDetect); probe.ready(ctx) && time.Now().Before(deadline); {
		if err := drive.SleepCtx(ctx, 50*time.Millisecond); err != nil {
			return errors.Join(err, well())
		}
	}
	sent := time.Now()
	if err := retry(ctx, func() error { return d.reader.drain(p.service, path, false) }); err != nil {
		return errors.Join(err, well())
	}
	rs.wrote("drain", path, history.WantOut, sent)
	hold := func(d time.Duration) error {
		for end := time.Now().Add(d); time.Now().Before(end); {
			probe.sample(ctx, rs, path)
			if err := drive.SleepCtx(ctx, 100*time.Millisecond); err != nil {
				return err
			}
		}
		return nil
	}
	err = hold(700 * time.Millisecond) // the provider has seen the drain
	err = errors.Join(err, well())
	if err == nil {
		err = hold(st.For)
	}
	sent = time.Now()
	if uerr := retry(context.Background(), func() error { return d.reader.drain(p.service, path, true) }); uerr != nil {
		return errors.Join(err, uerr)
	}
	rs.wrote("undrain", path, history.WantUp, sent)
	return err
}
