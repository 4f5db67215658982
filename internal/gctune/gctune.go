package gctune

import (
	"log/slog"
	"os"
	"runtime/debug"
)

// Garbage collector defaults for `dlq serve`, used unless the operator sets
// GOGC or GOMEMLIMIT. Ingest allocates a decoded header table (x-death is
// an array of tables) for every message and keeps little of it, so at Go's
// default GOGC=100 collection took a large share of the consumer's CPU. A
// higher GOGC collects a few times less often; the soft limit makes the
// collector work harder again before the heap approaches it, so memory stays
// bounded when large messages arrive.
const (
	gcPercentDefault   = 400
	memoryLimitDefault = 512 << 20
)

// Apply sets the defaults above where the environment does not choose.
func Apply(log *slog.Logger) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercentDefault)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimitDefault)
	}
	log.Debug("garbage collector", "gogc", os.Getenv("GOGC"), "gomemlimit", os.Getenv("GOMEMLIMIT"),
		"default_gogc", gcPercentDefault, "default_memory_limit_bytes", memoryLimitDefault)
}
