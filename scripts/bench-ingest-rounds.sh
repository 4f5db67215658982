#!/usr/bin/env bash
# Ingest against its raw limit, in interleaved rounds, and the guard against
# a change that costs ingest. Each round runs bench-limits' pipeline (the raw
# COPY pipeline: the raw limit, with its CPU), then, for each setting of
# SETTINGS, dlq-bench ingest built from this working tree ("head") and, with
# BASELINE=<git revision>, dlq-bench ingest built from that revision
# ("base"); head and base swap order every round. Binaries are built once,
# before the first round; no two runs overlap.
#
#   N         dead letters of 1 KiB per run, quorum queue (default 100000)
#   ROUNDS    rounds (default 3); the tables show medians over them. HEAD
#             goes first in odd rounds, and the first build after the raw
#             pipeline measured slower in all nine rounds of 2026-12-01's
#             evening (before each run waited for a quiet machine: settle,
#             not measured since): an even number gives each build the
#             first place as often
#   SETTINGS  what dlq runs with, a space list (default "text"):
#               text       text search on (the default of dlq serve)
#               notext     text search off (DLQ_SEARCH_TEXT=false)
#               encrypted  encryption at rest on (a random key), text search on
#               limits     text search on, and the dead letters are the raw
#                          pipeline's own (-dead-letter limits: one x-death
#                          entry, fewer headers and properties), so that both
#                          sides of the ratio drain the same bytes; the other
#                          settings drain dlq-bench's richer dead letters
#   BASELINE  a git revision to compare with; then rounds-verdict exits 1
#             when, for any setting, the median over the rounds of
#             (HEAD / raw) / (baseline / raw) is more than THRESHOLD percent
#             below 1, and warns when CPU per message rose more than that
#   THRESHOLD percent (default 10)
#   MODE      inproc (default): the consumer in dlq-bench's process, with
#             dlq serve's defaults and collector settings; process: `dlq
#             serve` itself as a subprocess, as a user runs it, with its
#             start-up and peak RSS. With BASELINE, process mode runs the
#             baseline's dlq binary (dlq-bench -dlq-bin) with --no-migrate on
#             the schema this tree migrates: a baseline as old as the previous
#             release runs there by the rolling-upgrade rule (UPGRADING.md)
#
#   make bench-ingest-rounds                                   (3 rounds, n = 100,000)
#   make bench-ingest-rounds BASELINE=$(git merge-base main HEAD) SETTINGS='limits text notext encrypted'
#   make bench-ingest-rounds MODE=process SETTINGS='text encrypted'
#
# Everything lands in tmp/bench-ingest/<start time>/ (a JSON file per round,
# setting and build in ingest-rounds/); scripts/bench-summary.py prints the
# tables at the end: msgs/s, ratio to raw and CPU µs per message (program,
# PostgreSQL, RabbitMQ, total), medians over the rounds.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
rounds=${ROUNDS:-3}
n=${N:-100000}
settings=${SETTINGS:-text}
threshold=${THRESHOLD:-10}
mode=${MODE:-inproc}
case $mode in
inproc | process) ;;
*) echo "MODE: $mode is not inproc or process" >&2; exit 2 ;;
esac
for s in $settings; do
	case $s in text | notext | encrypted | limits) ;; *) echo "SETTINGS: $s is not text, notext, encrypted or limits" >&2; exit 2 ;; esac
done
bench_prepare bench-ingest
rd=$out/ingest-rounds
mkdir -p "$rd"
if [ -n "${BASELINE:-}" ]; then
	wt=$out/baseline-src
	git worktree add --detach "$wt" "$BASELINE" >/dev/null || exit 1
	(cd "$wt" && go build -o "$out/dlq-bench-base" ./cmd/dlq-bench && go build -o "$out/dlq-base" ./cmd/dlq) || exit 1
	git worktree remove --force "$wt"
fi
# Process mode: dlq serve built once, each side's; both run under this
# tree's dlq-bench (the same clock and the same schema).
dlqbin_head="" dlqbin_base=""
if [ "$mode" = process ]; then
	go build -o "$out/dlq-head" ./cmd/dlq || exit 1
	dlqbin_head="-dlq-bin $out/dlq-head"
	[ -n "${BASELINE:-}" ] && dlqbin_base="-dlq-bin $out/dlq-base"
fi

# flags <binary> <setting>: dlq-bench ingest's flags for a setting, or
# "skip". A baseline from before a flag existed runs without it (before text
# search, "text" and "notext" run the same way, which is the comparison
# then); one without -encrypt cannot run "encrypted".
flags() {
	local help ts=""
	help=$("$1" ingest -h 2>&1)
	grep -qE -- '^\s+-text-search( |$)' <<<"$help" && ts=-text-search
	case $2 in
	text) echo "${ts:+$ts=true}" ;;
	notext) echo "${ts:+$ts=false}" ;;
	encrypted) grep -qE -- '^\s+-encrypt( |$)' <<<"$help" && echo "-encrypt on ${ts:+$ts=true}" || echo skip ;;
	limits) grep -q -- 'limits (as direct' <<<"$help" && echo "-dead-letter limits ${ts:+$ts=true}" || echo skip ;;
	esac
}

{
	echo "commit $(git rev-parse HEAD)$(git diff --quiet || echo ' (with uncommitted changes)')"
	[ -n "${BASELINE:-}" ] && echo "baseline $(git rev-parse "$BASELINE")"
	echo "cpus $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
	echo "settings $settings; n $n; threshold $threshold%"
	for i in $(seq 1 "$rounds"); do
		settle
		stamp "ingest round $i: raw"
		(cd "$out" && ./bench-limits -pg "$pg" -amqp "$amqp" -out "$rd/$i-raw.jsonl" \
			-summary "$rd/$i-raw.md" -explain /dev/null -tests pipeline -runs 1 -n "$n" \
			-batch 500 -flush 50ms -prefetch 1000 -pipeq quorum)
		builds=head
		if [ -n "${BASELINE:-}" ]; then
			builds="head base"
			[ $((i % 2)) = 0 ] && builds="base head"
		fi
		for s in $settings; do
			for b in $builds; do
				bin=$out/dlq-bench dlqbin=$dlqbin_head
				if [ "$b" = base ]; then
					dlqbin=$dlqbin_base
					[ "$mode" = inproc ] && bin=$out/dlq-bench-base
				fi
				f=$(flags "$bin" "$s")
				if [ "$f" = skip ]; then
					echo "ingest round $i: $s $b: skipped, this build has no flag for it"
					continue
				fi
				settle
				stamp "ingest round $i: $s $b ($f${dlqbin:+ $dlqbin})"
				# shellcheck disable=SC2086 # $f and $dlqbin are lists of flags
				"$bin" ingest -n "$n" -size 1024 -runs 1 -queue-type quorum -mode "$mode" $f $dlqbin -out "$rd/$i-$s-$b.jsonl"
			done
		done
	done
	stamp done
} > "$out/log.txt" 2>&1
python3 scripts/bench-summary.py "$out"
echo "raw results: $out"
if [ -n "${BASELINE:-}" ]; then
	echo
	"$out/dlq-bench" rounds-verdict -dir "$rd" -threshold "$threshold" 2>&1 | tee "$out/verdict.txt"
	status=${PIPESTATUS[0]}
	[ $status = 0 ] && echo "VERDICT: HEAD is within $threshold% of $BASELINE for every setting" ||
		echo "VERDICT: ingest regressed against $BASELINE (or runs are missing): exit $status"
	exit $status
fi
