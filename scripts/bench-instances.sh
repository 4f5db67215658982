#!/usr/bin/env bash
# Ingest and replay with 1, 2 and 3 `dlq serve` instances on one database and one
# queue, next to this machine's raw limits measured in the same session, as
# docs/BENCHMARKS.md ("Several instances") records them:
#
#   make bench-instances          (or scripts/bench-instances.sh)
#
# ROUNDS rounds (default 2), in sequence, each: bench-limits pipeline (the raw
# ingest limit), bench-limits replay (the raw replay limit), then dlq-bench
# instances (N dead letters, default 100,000, ingested and replayed as three tasks
# by INSTANCES instances in that order, default 1,2,3; 3,2,1 shows whether the
# machine's load drifted). About 5 minutes a round on 2 cores. Everything lands in
# tmp/bench-instances/<start time>/; the RESULT lines are printed at the end.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
rounds=${ROUNDS:-2}
n=${N:-100000}
counts=${INSTANCES:-1,2,3}
bench_prepare bench-instances

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
	for i in $(seq 1 "$rounds"); do
		stamp "round $i: raw ingest"
		limits "ingest$i" -tests pipeline -runs 1 -n 200000 -batch 500 -flush 50ms -prefetch 1000 -pipeq quorum
		stamp "round $i: raw replay"
		limits "replay$i" -tests replay -runs 1 -n 100000 -pipeq quorum
		stamp "round $i: dlq instances"
		"$out/dlq-bench" instances -n "$n" -instances "$counts" -runs 1 -amqp "$amqp" -pg "$pg" -out "$out/instances.jsonl"
	done
	stamp done
} > "$out/log.txt" 2>&1
grep -E '^===|RESULT' "$out/log.txt"
echo "raw results: $out"
