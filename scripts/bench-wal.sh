#!/usr/bin/env bash
# The WAL of an ingest drain, by relation: one `dlq-bench ingest` drain of N
# dead letters of 1 KiB (default 1000000; text search on, as dlq's default)
# into a PostgreSQL 15 server of its own, then every WAL record the drain and
# the text indexer's catch-up wrote, grouped by the relation it first
# touches (a table, an index, a TOAST table) and its kind, in bytes a
# message and the part of them that is full-page images. A private server,
# because the shared one's WAL holds every other client's writes, and so
# that `wal_keep_size` may keep the whole drain's WAL for pg_walinspect to
# read back (a million takes some 7 GB of disk for a moment).
#
#   make bench-wal                      # this tree, 1,000,000
#   make bench-wal N=100000 REV=bd1fae5 # another revision, to compare
#
# Needs root (the server runs as postgres) and PostgreSQL 15's binaries and
# contrib (pg_walinspect), which Debian's postgresql-15 package holds. Its
# settings are those of the shared server here: the defaults (128 MB of
# shared buffers, 1 GB of WAL between checkpoints), autovacuum off. Everything lands in
# tmp/bench-wal/<start time>/; the server's directory is removed at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n=${N:-1000000}
port=${PORT:-5499}
bin=/usr/lib/postgresql/15/bin
out=$PWD/tmp/bench-wal/$(date -u +%Y%m%dT%H%M%S)
data=$(mktemp -d /tmp/dlq-bench-wal.XXXXXX)
mkdir -p "$out"
chown postgres "$data"
scripts/services.sh >/dev/null # RabbitMQ

src=$PWD
if [ -n "${REV:-}" ]; then
	src=$out/src
	git worktree add --detach "$src" "$REV" >/dev/null
fi
stop() {
	su postgres -c "$bin/pg_ctl -D $data -m fast stop" >/dev/null 2>&1 || true
	rm -rf "$data"
	[ -n "${REV:-}" ] && git worktree remove --force "$src"
	return 0
}
trap stop EXIT
# -keep keeps the schema, whose relations name the records, and the run's
# queue and exchange on the shared RabbitMQ: those go when this ends.
before_queues=$(rabbitmqctl -q list_queues name 2>/dev/null | grep '^bench\.ingest\.dlq\.' | sort || true)
drop_queues() {
	for q in $(comm -13 <(echo "$before_queues") <(rabbitmqctl -q list_queues name 2>/dev/null | grep '^bench\.ingest\.dlq\.' | sort || true)); do
		x=${q/.dlq./.dlx.}
		rabbitmqctl -q delete_queue "$q" >/dev/null || true
		# rabbitmqctl deletes no exchange; the management API does, where it runs.
		curl -fsS -u guest:guest -X DELETE "http://127.0.0.1:15672/api/exchanges/%2F/$x" >/dev/null 2>&1 ||
			echo "left exchange $x on RabbitMQ (no management API to delete it)"
	done
}
trap 'drop_queues; stop' EXIT
(cd "$src" && go build -o "$out/dlq-bench" ./cmd/dlq-bench)
echo "commit $(git -C "$src" rev-parse HEAD)$(git -C "$src" diff --quiet || echo ' (with uncommitted changes)')" | tee "$out/wal.md"

su postgres -c "$bin/initdb -D $data -A trust" >/dev/null
su postgres -c "$bin/pg_ctl -D $data -l $data/log -w -o '-p $port -k /tmp -c listen_addresses=127.0.0.1 -c wal_keep_size=16GB -c autovacuum=off -c default_text_search_config=pg_catalog.english' start" >/dev/null
psql=(psql -X -q -t -A -h 127.0.0.1 -p "$port" -U postgres)
"${psql[@]}" -c 'CREATE DATABASE bench'
"${psql[@]}" -d bench -c 'CREATE EXTENSION pg_walinspect'
"${psql[@]}" -d bench -c 'CHECKPOINT'
start=$("${psql[@]}" -d bench -c 'SELECT pg_current_wal_insert_lsn()')

"$out/dlq-bench" ingest -pg "postgres://postgres@127.0.0.1:$port/bench?sslmode=disable" \
	-n "$n" -size 1024 -runs 1 -queue-type quorum -keep -out "$out/result.jsonl" | grep '^RESULT' | tee -a "$out/wal.md"
end=$("${psql[@]}" -d bench -c 'SELECT pg_current_wal_insert_lsn()')
echo "WAL $start to $end, $n messages" | tee -a "$out/wal.md"

# A record is counted once, on the relation of its first block; records
# that touch no relation (commits, checkpoints) under "(none)". Records are
# summed by relation file before the names are looked up: a million
# messages write some thirteen million records.
"${psql[@]}" -d bench -F ' | ' -v start="$start" -v end="$end" -v n="$n" <<'SQL' | tee -a "$out/wal.md"
\echo '| relation | kind | records a message | bytes a message | of them full-page images |'
\echo '|---|---|---|---|---|'
WITH r AS (
    SELECT (regexp_match(block_ref, 'rel \d+/\d+/(\d+)'))[1]::oid AS node,
           resource_manager || '/' || split_part(record_type, ' ', 1) AS kind,
           count(*) AS records, sum(record_length) AS bytes, sum(fpi_length) AS fpi
    FROM pg_get_wal_records_info(:'start', :'end')
    GROUP BY 1, 2
), named AS (
    SELECT coalesce(
               (SELECT 'TOAST of ' || t.relname FROM pg_class t WHERE t.reltoastrelid = c.oid),
               c.relname, CASE WHEN r.node IS NULL THEN '(none)' ELSE '(dropped or catalogue)' END) AS relation,
           r.kind, r.records, r.bytes, r.fpi
    FROM r LEFT JOIN pg_class c ON c.relfilenode = r.node AND c.relfilenode <> 0
)
SELECT '| ' || relation, kind, round(sum(records) / :n, 2),
       round(sum(bytes) / :n), round(sum(fpi) / :n) || ' |'
FROM named GROUP BY relation, kind
HAVING sum(bytes) >= :n * 5
UNION ALL
SELECT '| **all**', '', round(sum(records) / :n, 2),
       round(sum(bytes) / :n), round(sum(fpi) / :n) || ' |'
FROM r
ORDER BY 4 DESC;
SQL
echo "(relations under 5 bytes a message are left out of the rows, not of the total)" | tee -a "$out/wal.md"
echo "results: $out"
