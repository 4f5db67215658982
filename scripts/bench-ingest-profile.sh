#!/usr/bin/env bash
# Where each microsecond of an ingest drain goes: RUNS (default 3)
# `dlq-bench ingest` drains of N dead letters of 1 KiB (default 100000) from
# a quorum queue, in this process, each with a CPU and an allocation profile
# (at 100 samples a second one drain is a few hundred samples: three make
# the smaller stages steadier), then the table per
# stage (decode, convert, categories, hashes, COPY, text search, commit and
# acks, ...) of scripts/bench-profile-stages.py. Extra arguments go to
# dlq-bench ingest (-text-search=false, -encrypt on).
#
# Where Linux perf is installed (Debian package linux-perf; sampling needs
# root or perf_event_paranoid <= 0) each drain is also sampled machine-wide
# (-pgprofile), and scripts/bench-pg-stages.py adds the table of
# PostgreSQL's side: JSON input, B-tree and GIN indexes, heap, WAL, buffers.
# perf's sampling costs a little CPU of its own: the runs' figures are for
# the profile, not for docs/BENCHMARKS.md's ratios.
#
#   make bench-ingest-profile
#   make bench-ingest-profile N=100000 ARGS='-text-search=false'
#
# Everything lands in tmp/bench-profile/<start time>/: the binary, per run
# cpu*.pprof, allocs*.pprof and allocs*.pprof.base (the allocations before
# the drain, to subtract), pg*.perf, result.jsonl and stages.md. To look into a stage:
#
#   go tool pprof -top -cum -focus 'consumer\.convert' <dir>/dlq-bench <dir>/cpu.pprof
#   go tool pprof -sample_index=alloc_space -base <dir>/allocs.pprof.base -top <dir>/dlq-bench <dir>/allocs.pprof
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n=${N:-100000}
runs=${RUNS:-3}
out=$PWD/tmp/bench-profile/$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$out"
scripts/services.sh --database bench >/dev/null
go build -o "$out/dlq-bench" ./cmd/dlq-bench
echo "commit $(git rev-parse HEAD)$(git diff --quiet || echo ' (with uncommitted changes)')" | tee "$out/stages.md"
pg=()
if command -v perf >/dev/null && perf record --all-cpus --quiet --output /dev/null true 2>/dev/null; then
	pg=(-pgprofile "$out/pg.perf")
else
	echo "perf is not installed or may not sample the machine: PostgreSQL's side is not profiled" | tee -a "$out/stages.md"
fi
"$out/dlq-bench" ingest -n "$n" -size 1024 -runs "$runs" -queue-type quorum "$@" \
	-cpuprofile "$out/cpu.pprof" -memprofile "$out/allocs.pprof" "${pg[@]}" -out "$out/result.jsonl" | grep '^RESULT' | tee -a "$out/stages.md"
echo | tee -a "$out/stages.md"
python3 scripts/bench-profile-stages.py "$out" | tee -a "$out/stages.md"
if [ ${#pg[@]} -gt 0 ]; then
	echo | tee -a "$out/stages.md"
	python3 scripts/bench-pg-stages.py "$out" | tee -a "$out/stages.md"
fi
echo "profiles: $out"
