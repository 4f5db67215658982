package gctune

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Garbage collector defaults for `dlq serve`, used unless the operator sets
// GOGC or GOMEMLIMIT. Ingest allocates a decoded header table (x-death is
// an array of tables) for every message and keeps little of it, so at Go's
// default GOGC=100 collection took a large share of the consumer's CPU. A
// higher GOGC collects a few times less often.
//
// GOGC alone lets the heap grow to five times what is live. Draining a
// backlog of 1 KiB dead letters keeps 8 MB live at the median and 18 MB at
// the 90th percentile (the deliveries in flight and the batches), so the
// heap reached 120 MB and more between collections, and the process's peak
// RSS 136 to 157 MB, around the 150 MB it is held to (docs/BENCHMARKS.md).
// So the soft memory limit follows the live heap (Follow): three times
// what the last collection left live, never under memoryLimitFloor (which
// caps a drain of small messages where five times the live heap would pass
// it) nor over memoryLimitCeil (so that memory stays bounded when large
// messages arrive). While five times the live heap stays under the floor
// the limit changes nothing; from a third of the floor live (43 MB) the
// collector runs as at GOGC=200: 16 KiB messages cost about 2 µs more of
// CPU each and peaked at 205 MB instead of 423.
const (
	gcPercentDefault = 400
	memoryLimitFloor = 128 << 20
	memoryLimitCeil  = 512 << 20
	liveFactor       = 3
	// followEvery is how often Follow reads the live heap: collections
	// come every few hundred milliseconds under load.
	followEvery = 100 * time.Millisecond
)

// Apply sets the defaults above where the environment does not choose;
// the memory limit starts at its floor until Follow moves it.
func Apply(log *slog.Logger) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercentDefault)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimitFloor)
	}
	log.Debug("garbage collector", "gogc", os.Getenv("GOGC"), "gomemlimit", os.Getenv("GOMEMLIMIT"),
		"default_gogc", gcPercentDefault, "memory_limit_floor_bytes", memoryLimitFloor, "memory_limit_ceiling_bytes", memoryLimitCeil)
}

// Follow keeps the soft memory limit at limitFor(the live heap after the
// latest collection) until ctx ends, unless GOMEMLIMIT chose the limit;
// it returns at once then. The Go collector's metrics show the limit
// (go_gc_gomemlimit_bytes).
func Follow(ctx context.Context, log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	samples := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	var cycles uint64
	t := time.NewTicker(followEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(samples)
		if samples[1].Value.Kind() != metrics.KindUint64 || samples[1].Value.Uint64() == cycles {
			continue // no collection since the last look: the live heap is as it was
		}
		cycles = samples[1].Value.Uint64()
		limit := limitFor(samples[0].Value.Uint64())
		// Logged when it moves by more than 16 MiB, not at every collection.
		if old := debug.SetMemoryLimit(limit); max(old, limit)-min(old, limit) > 16<<20 {
			log.Debug("garbage collector memory limit", "bytes", limit, "was", old, "live_bytes", samples[0].Value.Uint64())
		}
	}
}

// limitFor is the soft memory limit for a live heap of live bytes.
func limitFor(live uint64) int64 {
	return min(max(int64(live)*liveFactor, memoryLimitFloor), memoryLimitCeil)
}
