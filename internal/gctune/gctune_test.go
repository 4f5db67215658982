package gctune

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// Not parallel: the collector settings are process-wide.
func TestApply(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	log := slog.New(slog.DiscardHandler)

	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	Apply(log)
	if got := debug.SetGCPercent(100); got != gcPercentDefault {
		t.Errorf("GOGC unset: GC percent %d, want %d", got, gcPercentDefault)
	}
	if got := debug.SetMemoryLimit(-1); got != memoryLimitFloor {
		t.Errorf("GOMEMLIMIT unset: memory limit %d, want %d", got, memoryLimitFloor)
	}

	// The operator's choice stands.
	t.Setenv("GOGC", "50")
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetGCPercent(50)
	debug.SetMemoryLimit(1 << 30)
	Apply(log)
	if got := debug.SetGCPercent(50); got != 50 {
		t.Errorf("GOGC=50: GC percent %d, want 50", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 1<<30 {
		t.Errorf("GOMEMLIMIT=1GiB: memory limit %d, want %d", got, 1<<30)
	}
}

func TestLimitFor(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int64
	}{
		{0, memoryLimitFloor},
		{30 << 20, memoryLimitFloor}, // a drain of small messages: capped at the floor
		{50 << 20, 150 << 20},
		{200 << 20, memoryLimitCeil}, // large messages: bounded as before
	} {
		if got := limitFor(c.live); got != c.want {
			t.Errorf("limitFor(%d MiB) = %d MiB, want %d MiB", c.live>>20, got>>20, c.want>>20)
		}
	}
}

// TestFollowTracksTheLiveHeap: the limit rises with what a collection
// leaves live and falls back to the floor when it is freed. Not parallel:
// the collector settings are process-wide.
func TestFollowTracksTheLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(memoryLimitFloor))
	t.Setenv("GOMEMLIMIT", "")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); Follow(ctx, slog.New(slog.DiscardHandler)) }()
	defer func() { cancel(); <-done }()

	waitLimit := func(ok func(int64) bool, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			runtime.GC()
			got := debug.SetMemoryLimit(-1)
			if ok(got) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("memory limit %d MiB after 10 s, want %s", got>>20, what)
			}
			time.Sleep(followEvery / 2)
		}
	}
	live := make([][]byte, 80)
	for i := range live {
		live[i] = make([]byte, 1<<20)
		live[i][0] = 1
	}
	waitLimit(func(l int64) bool { return l >= 3*80<<20 }, "three times 80 MiB live")
	runtime.KeepAlive(live)
	live = nil
	waitLimit(func(l int64) bool { return l == memoryLimitFloor }, "the floor once freed")
}

// TestFollowLeavesTheOperatorsLimit: with GOMEMLIMIT set, Follow returns
// at once and the limit stays the operator's.
func TestFollowLeavesTheOperatorsLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(1 << 30))
	t.Setenv("GOMEMLIMIT", "1GiB")
	done := make(chan struct{})
	go func() { defer close(done); Follow(t.Context(), slog.New(slog.DiscardHandler)) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Follow kept running with GOMEMLIMIT set")
	}
	if got := debug.SetMemoryLimit(-1); got != 1<<30 {
		t.Errorf("memory limit %d, want the operator's %d", got, 1<<30)
	}
}
