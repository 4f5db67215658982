#!/usr/bin/env bash
# Ingest against its raw limit, in rounds, with an optional A/B against an
# earlier build: each round runs bench-limits' COPY pipeline (the raw
# limit), then dlq-bench ingest from this working tree, and, with
# BASELINE=<git revision>, dlq-bench ingest built from that revision.
# Binaries are built once, before the first round; no two runs overlap.
#
#   make bench-ingest-rounds                       (3 rounds, n = 200,000)
#   make bench-ingest-rounds ROUNDS=5 BASELINE=fdd4749
#
# Everything lands in tmp/bench-ingest/<start time>/; scripts/bench-summary.py
# prints the table at the end (medians of the rounds' ratios).
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
rounds=${ROUNDS:-3}
n=${N:-200000}
bench_prepare bench-ingest
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
		stamp "ingest pair $i: raw"
		(cd "$out" && ./bench-limits -pg "$pg" -amqp "$amqp" -out "$out/limits.jsonl" \
			-summary "$out/limits-summary-$i.md" -explain /dev/null -tests pipeline,naive -runs 1 -n "$n" \
			-nnaive 20000 -naiveprefetch 1000 -batch 500 -flush 50ms -prefetch 1000 -pipeq quorum)
		stamp "ingest pair $i: dlq"
		"$out/dlq-bench" ingest -n "$n" -size 1024 -runs 1 -out "$out/ingest.jsonl"
		if [ -n "${BASELINE:-}" ]; then
			stamp "ingest pair $i: baseline"
			"$out/dlq-bench-base" ingest -n "$n" -size 1024 -runs 1 -out "$out/ingest-base.jsonl"
		fi
	done
	stamp done
} > "$out/log.txt" 2>&1
python3 scripts/bench-summary.py "$out"
echo "raw results: $out"
