package gctune

import (
	"log/slog"
	"runtime/debug"
	"testing"
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
	if got := debug.SetMemoryLimit(-1); got != memoryLimitDefault {
		t.Errorf("GOMEMLIMIT unset: memory limit %d, want %d", got, memoryLimitDefault)
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
