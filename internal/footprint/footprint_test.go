package footprint

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// Nothing is done while the count moves; once it stands still for a
// period, it is done once, and no more.
func TestWhenQuietWaitsForAQuietPeriod(t *testing.T) {
	var count atomic.Int64
	var done atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		whenQuiet(ctx, 20*time.Millisecond, count.Load, func() { done.Add(1) })
	}()
	busy := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(busy) {
		count.Add(1)
		time.Sleep(time.Millisecond)
	}
	if n := done.Load(); n != 0 {
		t.Fatalf("done %d times while busy", n)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("not done once quiet")
	}
	if n := done.Load(); n != 1 {
		t.Fatalf("done %d times, want once", n)
	}
}

// Ended before a quiet period, it does nothing.
func TestWhenQuietEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	whenQuiet(ctx, time.Hour, func() int64 { return 0 }, func() { t.Error("done after its context ended") })
}
