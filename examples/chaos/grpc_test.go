package main

import (
	"slices"
	"testing"
)

func TestIsCrashFailureThroughAGatewayThatRetriesNothing(t *testing.T) {
	ph := &phase{killAt: at(1000), killedAddr: "127.0.0.1:4000"}
	onKilled := `HTTP 502: {"error":"call 127.0.0.1:4000: rpc error: code = Unavailable desc = error reading from server: EOF","upstream":"127.0.0.1:4000"}`
	tests := []struct {
		name string
		give sample
		want bool
	}{
		{"a GET in flight on the killed provider", sample{noRetry: true, failed: true, at: at(900), done: at(1100), reason: onKilled}, true},
		{"a POST in flight on the killed provider", sample{noRetry: true, post: true, failed: true, at: at(900), done: at(1100), reason: onKilled}, true},
		{"a GET sent before the client saw it die", sample{noRetry: true, failed: true, at: at(1001), done: at(1002), reason: onKilled}, true},
		{"a GET done before the kill", sample{noRetry: true, failed: true, at: at(800), done: at(999), reason: onKilled}, false},
		{"a GET that failed on another provider", sample{noRetry: true, failed: true, at: at(900), done: at(1100), reason: "call 127.0.0.1:4001: EOF"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isCrashFailure(tt.give, ph); got != tt.want {
				t.Errorf("isCrashFailure = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestIsCrashFailureCountsPostsSentBeforeTheProviderDied(t *testing.T) {
	ph := &phase{killAt: at(1000), deadAt: at(1005), killedAddr: "127.0.0.1:4000"}
	onKilled := "HTTP 502: attempt 1 on 127.0.0.1:4000: read: connection reset by peer"
	if !isCrashFailure(sample{post: true, failed: true, at: at(1003), done: at(1006), reason: onKilled}, ph) {
		t.Error("a POST sent after the SIGKILL but before the exit is not the crash's")
	}
	if isCrashFailure(sample{post: true, failed: true, at: at(1006), done: at(1010), reason: onKilled}, ph) {
		t.Error("a POST sent after the exit is the crash's")
	}
}

func TestLinesOfTheGRPCGroupNameTheTransport(t *testing.T) {
	rs := []faultResult{{Transport: transportGRPC, Name: "kill", Requests: 3, Duplicated: 1, CrashFailed: 2, Recovered: -1}}
	if got, want := chaosLine(rs[0]), "CHAOS transport=grpc fault=kill requests=3 failed=0 duplicated=1 recovered_ms=-1"; got != want {
		t.Errorf("chaosLine = %q, want %q", got, want)
	}
	if got, want := resultLine(rs), "RESULT mode=chaos transport=grpc requests=3 failed=0 duplicated=1 crash_failed=2"; got != want {
		t.Errorf("resultLine = %q, want %q", got, want)
	}
	rs[0].Transport = transportHTTP
	if got, want := resultLine(rs), "RESULT mode=chaos requests=3 failed=0 duplicated=1 crash_failed=2"; got != want {
		t.Errorf("HTTP resultLine = %q, want %q", got, want)
	}
}

func TestParseTransports(t *testing.T) {
	tests := []struct {
		give    string
		want    []string
		wantErr bool
	}{
		{give: "http,grpc", want: []string{"http", "grpc"}},
		{give: " grpc ,", want: []string{"grpc"}},
		{give: "http,http", wantErr: true},
		{give: "quic", wantErr: true},
		{give: ",", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseTransports(tt.give)
		if (err != nil) != tt.wantErr || (!tt.wantErr && !slices.Equal(got, tt.want)) {
			t.Errorf("parseTransports(%q) = %v, %v; want %v (error %v)", tt.give, got, err, tt.want, tt.wantErr)
		}
	}
}
