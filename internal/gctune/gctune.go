package gctune

import (
	"log/slog"
	"os"
	"runtime/debug"
)

// Garbage collector defaults for `dlq serve`, used unless the operator sets
// GOGC or GOMEMLIMIT. Ingest allocates several kilobytes for every message
// (frames, body, the row's JSON) and keeps little of it, so at Go's default
// GOGC=100 collection took a large share of the consumer's CPU. A higher
// GOGC collects a few times less often; the heap then peaks at 1+GOGC/100
// times what is in flight, which is what a drain's peak RSS follows (350
// kept a million-message drain under 150 MB where 400 reached 151 MB:
// docs/BENCHMARKS.md). The soft limit makes the collector work harder
// again before the heap approaches it, so memory stays bounded when large
// messages arrive.
const (
	gcPercentDefault   = 350
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
