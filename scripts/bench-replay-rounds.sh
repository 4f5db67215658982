#!/usr/bin/env bash
# Replay against its raw limit, in rounds, as docs/BENCHMARKS.md records it:
# each round runs bench-limits' replay test (the raw confirmed-publish and
# batched-update limit), then dlq-bench replay from this working tree, and,
# with BASELINE=<git revision>, dlq-bench replay built from that revision
# (an A/B in the same rounds). Binaries are built once, before the first
# round; no two benchmarks overlap.
#
#   make bench-replay-rounds                       (5 rounds, n = 100,000)
#   make bench-replay-rounds ROUNDS=3 BASELINE=HEAD~3
#
# Everything lands in tmp/bench-replay/<start time>/; scripts/bench-summary.py
# prints the table at the end (median of the rounds' ratios).
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
rounds=${ROUNDS:-5}
n=${N:-100000}
bench_prepare bench-replay
if [ -n "${BASELINE:-}" ]; then
	wt=$out/baseline-src
	git worktree add --detach "$wt" "$BASELINE" >/dev/null || exit 1
	(cd "$wt" && go build -o "$out/dlq-bench-base" ./cmd/dlq-bench) || exit 1
	git worktree remove --force "$wt"
fi

{
	echo "commit $(git rev-parse HEAD)$(git diff --quiet || echo ' (with uncommitted changes)')"
	[ -n "${BASELINE:-}" ] && echo "baseline $(git rev-parse "$BASELINE")"
	echo "cpus $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
	for i in $(seq 1 "$rounds"); do
		stamp "replay round $i: raw"
		(cd "$out" && ./bench-limits -pg "$pg" -amqp "$amqp" -out "$out/limits.jsonl" \
			-summary "$out/limits-summary-$i.md" -explain /dev/null -tests replay -runs 1 -n "$n" -pipeq quorum)
		stamp "replay round $i: dlq"
		"$out/dlq-bench" replay -n "$n" -runs 1 -out "$out/replay.jsonl"
		if [ -n "${BASELINE:-}" ]; then
			stamp "replay round $i: baseline"
			"$out/dlq-bench-base" replay -n "$n" -runs 1 -out "$out/replay-base.jsonl"
		fi
	done
	stamp done
} > "$out/log.txt" 2>&1
python3 scripts/bench-summary.py "$out"
echo "raw results: $out"
