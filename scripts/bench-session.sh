#!/usr/bin/env bash
# One benchmark session, as docs/BENCHMARKS.md records it: the raw limits of
# ../shared/bench-limits interleaved with dlq's own runs, in sequence (no two
# benchmarks overlap), from binaries built once from this working tree.
#
#   make bench-session            (or scripts/bench-session.sh)
#
# It runs, about 25 minutes on a 2-core machine:
#   - 3 ingest pairs: bench-limits pipeline + naive, then dlq-bench ingest (1 KiB, n = 200,000);
#   - dlq-bench ingest of 16 KiB (n = 50,000) and of a 1,000,000 backlog as a
#     `dlq serve` subprocess (peak RSS);
#   - 3 replay pairs: bench-limits replay, then dlq-bench replay (n = 100,000);
#   - 3 search-cost pairs: dlq-bench ingest with every index, then without the
#     search indexes.
# Everything lands in tmp/bench-session/<start time>/; scripts/bench-summary.py
# prints the tables at the end. PAIRS=n changes the number of pairs.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
pairs=${PAIRS:-3}
bench_prepare bench-session

limits() {
	local name=$1
	shift
	(cd "$out" && ./bench-limits -pg "$pg" -amqp "$amqp" -out "$out/limits.jsonl" \
		-summary "$out/limits-summary-$name.md" -explain /dev/null "$@")
}
{
	echo "commit $(git rev-parse HEAD)$(git diff --quiet || echo ' (with uncommitted changes)')"
	echo "cpus $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
	uname -r
	for i in $(seq 1 "$pairs"); do
		stamp "ingest pair $i: raw"
		limits "ingest$i" -tests pipeline,naive -runs 1 -n 200000 -nnaive 20000 -naiveprefetch 1000 \
			-batch 500 -flush 50ms -prefetch 1000 -pipeq quorum
		stamp "ingest pair $i: dlq"
		"$out/dlq-bench" ingest -n 200000 -size 1024 -runs 1 -out "$out/ingest.jsonl"
	done
	stamp "ingest 16 KiB"
	"$out/dlq-bench" ingest -n 50000 -size 16384 -runs 1 -out "$out/ingest.jsonl"
	stamp "ingest 1M process"
	"$out/dlq-bench" ingest -n 1000000 -size 1024 -runs 1 -mode process -out "$out/ingest.jsonl"
	for i in $(seq 1 "$pairs"); do
		stamp "replay round $i: raw"
		limits "replay$i" -tests replay -runs 1 -n 100000 -pipeq quorum
		stamp "replay round $i: dlq"
		"$out/dlq-bench" replay -n 100000 -runs 1 -out "$out/replay.jsonl"
	done
	stamp "search cost"
	for i in $(seq 1 "$pairs"); do
		"$out/dlq-bench" ingest -size 1024 -runs 1 -n 200000 -out "$out/searchcost.jsonl"
		"$out/dlq-bench" ingest -size 1024 -runs 1 -n 200000 \
			-without-index dead_messages_search,dead_messages_failed_at_brin -out "$out/searchcost.jsonl"
	done
	stamp done
} > "$out/log.txt" 2>&1
python3 scripts/bench-summary.py "$out"
echo "raw results: $out"
