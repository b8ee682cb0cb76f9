package main

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestResultLineOfAGRPCModeNamesItsTransport(t *testing.T) {
	r := sampleResult()
	r.Transport = transportGRPC
	want := fmt.Sprintf("RESULT mode=naive transport=grpc requests=300 failed=1 duplicated=1 p99_ms=%.1f max_stop_ms=250.0 crash_failed=2", ms(r.Total.P99))
	if got := resultLine(r); got != want {
		t.Errorf("resultLine:\n got %s\nwant %s", got, want)
	}
	r.Invalid = "no load"
	if got := resultLine(r); got != want+" invalid=1" {
		t.Errorf("resultLine of an invalid mode:\n got %s\nwant %s invalid=1", got, want)
	}
	var b bytes.Buffer
	writeTable(&b, r)
	if !strings.Contains(b.String(), "=== mode naive transport=grpc: 300 requests") {
		t.Errorf("the table does not name the transport:\n%s", b.String())
	}
	// An HTTP mode's line names no transport, as before gRPC.
	r.Transport, r.Invalid = transportHTTP, ""
	if got := resultLine(r); strings.Contains(got, "transport=") {
		t.Errorf("HTTP resultLine %q names a transport", got)
	}
}

func TestVerdictHoldsAGRPCModeToTheSameBar(t *testing.T) {
	r := &modeResult{Mode: "graceful", Transport: transportGRPC, Total: consumerResult{Failed: 1}}
	if got := verdict(r); !strings.Contains(got, "graceful mode failed 1") {
		t.Errorf("verdict = %q, want a graceful failure", got)
	}
	r = &modeResult{Mode: "naive", Transport: transportGRPC, Total: consumerResult{CrashInFlight: 1}}
	if got := verdict(r); !strings.Contains(got, "no harm") {
		t.Errorf("verdict = %q, want no harm", got)
	}
}

func TestSlotsOfTheGRPCRun(t *testing.T) {
	consumers, providers := slots(transportGRPC, "graceful")
	if got := namesOf(consumers); !slices.Equal(got, []string{consumerGracekit, consumerGoKit, consumerGRPCGo}) {
		t.Errorf("consumers %v", got)
	}
	for _, c := range consumers {
		if !c.watches || c.service != grpcGatewayService || !slices.Contains(c.args, "-transport") {
			t.Errorf("consumer %+v: want a gRPC gateway that watches ZooKeeper", c)
		}
	}
	if len(providers) != nProviders {
		t.Fatalf("%d providers", len(providers))
	}
	for _, p := range providers {
		if !p.grpc || p.service != grpcProviderService || !slices.Equal(p.args, []string{"-mode", "graceful", "-transport", "grpc"}) {
			t.Errorf("provider %+v: want a gRPC provider", p)
		}
	}
	// The HTTP run is as it was: its services and the cached gateway.
	consumers, providers = slots(transportHTTP, "naive")
	if got := namesOf(consumers); !slices.Equal(got, []string{consumerGracekit, consumerGoKit, consumerCached}) || consumers[2].watches {
		t.Errorf("HTTP consumers %v", got)
	}
	if providers[0].service != providerService || providers[0].grpc || !slices.Equal(providers[0].args, []string{"-mode", "naive"}) {
		t.Errorf("HTTP provider %+v", providers[0])
	}
}
