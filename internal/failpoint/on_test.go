//go:build gracekit_failpoints

package failpoint

import (
	"testing"
	"time"
)

func TestArmedPointSleepsAtMostItsCount(t *testing.T) {
	t.Cleanup(func() { Disable(StopAfterFlush) })
	if err := Enable(StopAfterFlush, "2*sleep(1ms)"); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		Inject(StopAfterFlush)
	}
	if got := Hits(StopAfterFlush); got != 2 {
		t.Fatalf("Hits = %d after 5 injections of a 2* point, want 2", got)
	}
}

func TestBadSpecsAreRefused(t *testing.T) {
	tests := []struct{ give string }{
		{"sleep"}, {"0%sleep(1ms)"}, {"101%sleep(1ms)"}, {"x*sleep(1ms)"}, {"sleep(forever)"}, {"sleep(2m)"}, {"panic"},
	}
	for _, tt := range tests {
		if err := Enable(WatchBeforeRewatch, tt.give); err == nil {
			Disable(WatchBeforeRewatch)
			t.Errorf("Enable(%q) = nil, want an error", tt.give)
		}
	}
	if err := Enable("sd/nowhere", "sleep(1ms)"); err == nil {
		t.Error("Enable of an unknown point = nil, want an error")
	}
}

func TestEnableAllReadsTheEnvironmentSyntax(t *testing.T) {
	t.Cleanup(func() { Disable(RegisterAfterCreate); Disable(DeregisterBeforeDelete) })
	if err := EnableAll(RegisterAfterCreate + "=100%1*sleep(1ms); " + DeregisterBeforeDelete + "=50%sleep(" + time.Millisecond.String() + ")"); err != nil {
		t.Fatal(err)
	}
	Inject(RegisterAfterCreate)
	Inject(RegisterAfterCreate)
	if got := Hits(RegisterAfterCreate); got != 1 {
		t.Fatalf("Hits = %d, want 1", got)
	}
}
