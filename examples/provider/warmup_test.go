package main

import (
	"context"
	"testing"
	"time"
)

func TestWarmupRejectsNegativeDurations(t *testing.T) {
	for _, tt := range []struct{ span, peak time.Duration }{{-time.Second, 0}, {time.Second, -time.Millisecond}} {
		if _, err := newWarmup(tt.span, tt.peak); err == nil {
			t.Fatalf("newWarmup(%v, %v) accepted", tt.span, tt.peak)
		}
	}
}

func TestWarmupEndsAndThenCostsNothing(t *testing.T) {
	w, err := newWarmup(20*time.Millisecond, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for !w.warm.Load() { // each call is cold until the span after the first has passed
		if err := w.cost(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if w.first.IsZero() {
		t.Fatal("the first call was not recorded")
	}
	var nilWarmup *warmup
	if err := nilWarmup.cost(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestWarmupCallEndsWithItsContext(t *testing.T) {
	w, _ := newWarmup(time.Hour, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.cost(ctx); err == nil {
		t.Fatal("a cancelled call waited out its warm-up delay")
	}
}
