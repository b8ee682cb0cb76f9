package flush_test

import (
	"log/slog"
	"testing"

	"github.com/gracekit/gracekit/shutdown/flush"
)

// Passing an option to the wrong constructor does not compile; this test
// pins the types that make it so.
func TestOptionsApplyOnlyToTheirConstructor(t *testing.T) {
	notifierOnly := []any{
		flush.StaticTargets(), flush.SpringTargets(), flush.Targets(nil), flush.RetryMax(1),
		flush.RetryWait(1, 2), flush.AttemptTimeout(1), flush.HTTPClient(nil),
		flush.Registration(nil), flush.CallCounter(nil),
	}
	for _, o := range notifierOnly {
		if _, ok := o.(flush.HandlerOption); ok {
			t.Errorf("%T is a HandlerOption, want a NotifierOption only", o)
		}
	}
	handlerOnly := []any{
		flush.TimestampWindow(1), flush.MaxBodyBytes(1), flush.NonceCacheSize(1),
		flush.RefusalCounter(nil), flush.ResultCounter(nil),
	}
	for _, o := range handlerOnly {
		if _, ok := o.(flush.NotifierOption); ok {
			t.Errorf("%T is a NotifierOption, want a HandlerOption only", o)
		}
	}
	// WithLogger applies to both.
	var _ flush.NotifierOption = flush.WithLogger(slog.Default())
	var _ flush.HandlerOption = flush.WithLogger(slog.Default())
}

func TestWithLoggerRejectsANilLogger(t *testing.T) {
	const want = "flush: nil logger"
	if _, err := flush.NewNotifier(self, secret, flush.WithLogger(nil)); err == nil || err.Error() != want {
		t.Errorf("NewNotifier: got %v, want %q", err, want)
	}
	if _, err := flush.NewHandler(secret, []string{"http://gw/flush"}, flush.EvicterMap(nil), flush.WithLogger(nil)); err == nil || err.Error() != want {
		t.Errorf("NewHandler: got %v, want %q", err, want)
	}
}
