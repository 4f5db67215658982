#!/usr/bin/env bash
# What the search indexes cost ingest, end to end (issue: "whatever the search
# indexes cost, ingest loses no more than 15% throughput; measure it with and
# without them").
#
# Runs `dlq-bench ingest` in interleaved pairs on the same build: one run with
# every index, one with the search indexes dropped after migrating (the GIN
# index over search_hashes, and the BRIN index over failed_at that narrows
# time ranges). The keys are still computed and written either way, so the
# difference is what maintaining the indexes costs. Interleaving spreads the
# machine's drift over both sides; the medians are compared.
#
#   scripts/bench-search-cost.sh [pairs] [messages per run] [extra dlq-bench ingest flags...]
#
# Text search (migration 00079) on its own: pairs of runs with text search on
# (ingest queues its rows, the text indexer runs beside it at its default
# pacing, as in dlq serve) and off, with bodies of words (random bytes are
# binary and never tokenised):
#
#   TEXT_SEARCH=1 scripts/bench-search-cost.sh 3 100000 -text
#
# Results: tmp/bench-search-cost/results.jsonl (one JSON line per run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

pairs=${1:-5}
n=${2:-200000}
shift $(( $# < 2 ? $# : 2 ))
indexes=${SEARCH_INDEXES:-dead_messages_search,dead_messages_failed_at_brin}
out=tmp/bench-search-cost
mkdir -p "$out"
results=$out/results.jsonl
: > "$results"

bin=$out/dlq-bench
go build -o "$bin" ./cmd/dlq-bench

for i in $(seq 1 "$pairs"); do
	if [ -n "${TEXT_SEARCH:-}" ]; then
		echo "pair $i/$pairs: text search on (indexer at its default pacing)" >&2
		"$bin" ingest -size 1024 -runs 1 -n "$n" -text-search=true -out "$results" "$@" >&2
		echo "pair $i/$pairs: text search off" >&2
		"$bin" ingest -size 1024 -runs 1 -n "$n" -text-search=false -out "$results" "$@" >&2
		continue
	fi
	echo "pair $i/$pairs: with every index" >&2
	"$bin" ingest -size 1024 -runs 1 -n "$n" -text-search=false -out "$results" "$@" >&2
	echo "pair $i/$pairs: without $indexes" >&2
	"$bin" ingest -size 1024 -runs 1 -n "$n" -text-search=false -without-index "$indexes" -out "$results" "$@" >&2
done

python3 - "$results" "${TEXT_SEARCH:-}" <<'PY'
import json, statistics, sys
text = bool(sys.argv[2])
with_, without = [], []
for line in open(sys.argv[1]):
    r = json.loads(line)
    off = r.get("without_indexes") if not text else not r.get("text_search")
    (without if off else with_).append(r["msgs_per_s"])
mw, mo = statistics.median(with_), statistics.median(without)
on, off = ("text search on:  ", "text search off: ") if text else ("with every index:       ", "without search indexes: ")
print(f"{on}{', '.join(f'{x:.0f}' for x in with_)} msgs/s (median {mw:.0f})")
print(f"{off}{', '.join(f'{x:.0f}' for x in without)} msgs/s (median {mo:.0f})")
pairs = [1 - a / b for a, b in zip(with_, without)]
print(f"loss per pair: {', '.join(f'{p:.1%}' for p in pairs)}; median of pairs {statistics.median(pairs):.1%}; of medians {1 - mw / mo:.1%} (target: at most 15%)")
PY
