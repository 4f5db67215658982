#!/usr/bin/env bash
# Replay against its raw limit, in rounds, as docs/BENCHMARKS.md records it.
# Each round runs, for each queue type of QTYPES in turn:
#   raw     bench-limits' replay test into a queue of that type (the raw
#           confirmed-publish and batched-update limit);
#   seeded  dlq-bench replay: the replay service over rows stored by the
#           ingest batch writer;
#   e2e     dlq-bench replay -mode e2e: a dlq serve process ingests N dead
#           letters from a source queue of that type, then replays them to
#           it on a command sent to its control queue;
#   base    with BASELINE=<git revision>, the seeded run of dlq-bench built
#           from that revision (an A/B in the same rounds).
# Binaries are built once, before the first round; no two benchmarks overlap.
#
#   make bench-replay-rounds                         (5 rounds, quorum and classic, n = 100,000)
#   make bench-replay-rounds ROUNDS=3 QTYPES=classic MODES=e2e
#   make bench-replay-rounds ROUNDS=3 BASELINE=HEAD~3
#
# Everything lands in tmp/bench-replay/<start time>/ (one JSON file per round,
# queue type and run in rounds/); scripts/bench-summary.py prints a table per
# queue type at the end, with the median of the rounds' ratios.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
rounds=${ROUNDS:-5}
n=${N:-100000}
qtypes=${QTYPES:-quorum classic}
modes=${MODES:-seeded e2e}
for qt in $qtypes; do
	case $qt in quorum | classic) ;; *) echo "QTYPES: $qt is not quorum or classic" >&2; exit 2 ;; esac
done
for m in $modes; do
	case $m in seeded | e2e) ;; *) echo "MODES: $m is not seeded or e2e" >&2; exit 2 ;; esac
done
bench_prepare bench-replay
mkdir -p "$out/rounds"
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
	echo "queue types $qtypes; modes $modes; n $n"
	for i in $(seq 1 "$rounds"); do
		for qt in $qtypes; do
			r=$out/rounds/$i-$qt
			stamp "replay round $i $qt: raw"
			(cd "$out" && ./bench-limits -pg "$pg" -amqp "$amqp" -out "$r-raw.jsonl" \
				-summary "$r-raw.md" -explain /dev/null -tests replay -runs 1 -n "$n" -pipeq "$qt")
			for m in $modes; do
				stamp "replay round $i $qt: $m"
				"$out/dlq-bench" replay -mode "$m" -queue-type "$qt" -n "$n" -runs 1 -out "$r-$m.jsonl"
			done
			if [ -n "${BASELINE:-}" ]; then
				stamp "replay round $i $qt: base"
				"$out/dlq-bench-base" replay -queue-type "$qt" -n "$n" -runs 1 -out "$r-base.jsonl"
			fi
		done
	done
	stamp done
} > "$out/log.txt" 2>&1
python3 scripts/bench-summary.py "$out"
echo "raw results: $out"
