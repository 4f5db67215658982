#!/usr/bin/env python3
"""Where PostgreSQL's microseconds of an ingest drain go, per stage, from the
perf samples of `dlq-bench ingest -pgprofile pg.perf` (scripts/
bench-ingest-profile.sh runs it when perf is installed).

    bench-pg-stages.py <profile folder>

The folder holds pg*.perf (one per run, named as dlq-bench names them:
pg.perf, pg-1024-2.perf, ...) and result.jsonl. perf sampled the whole
machine; only the samples of processes named postgres count (the backends
of ingest and of the text indexer, and the server's own: WAL writer,
checkpointer, autovacuum, as the runs' `us_per_msg_pg` counts them). Each
sample's function goes to the first stage of STAGES whose pattern matches
it. PostgreSQL's packaged build keeps no frame pointers, so there are no
call stacks: a function shared by several stages (memory allocation,
hashing) has a stage of its own. The µs per message of a stage is its
share of the samples times the runs' median `us_per_msg_pg`.
"""
import glob, json, os, re, statistics, subprocess, sys
from collections import defaultdict

# (stage, pattern over a function's name), first match wins. Names are
# PostgreSQL 15's; static functions the binary does not name show as
# addresses and land in "unnamed".
STAGES = [
    ("kernel: syscalls, network, page cache", r"^\[k\]"),
    ("unnamed (static functions, no symbol)", r"^0x"),
    ("JSON input: json columns validated, jsonb built (headers, properties, x_death, failure)",
     r"(?i)json"),
    # rbt (the accumulator) and the sorts are GIN's pending-list cleanup and
    # its sorting of each row's keys: nothing else in ingest sorts.
    ("GIN index of the search hashes (pending list and its cleanup)",
     r"^gin|Gin|arrayextract|deconstruct_array|^rbt_|qsort"),
    ("B-tree indexes: descend, compare, insert (pkey and seven secondaries)",
     r"^_bt_|^bt|^index_|FormIndexDatum|ExecInsertIndexTuples|index_getattr|varstr_cmp|texteq|"
     r"collation|lc_collate|strcoll|ExecQual|ExecInterpExpr|ExecEvalExpr|ExecEvalScalarArrayOp|int8cmp|timestamp_cmp|"
     r"FunctionCall2Coll|datum_image_eq"),
    ("BRIN index of failed_at", r"^brin"),
    ("heap: form and place rows, toast check, relation extension",
     r"^heap_|^Page|RelationGetBufferForTuple|RelationAddExtraBlocks|toast_|slot_|tts_|ExecConstraints|"
     r"ExecComputeStoredGenerated|ExecStoreVirtualTuple|smgr|mdextend|mdnblocks|llseek|FileWrite|FileExtend|CopyMultiInsert|"
     r"RelationPutHeapTuple|fsm_"),
    ("WAL: records, CRC, flush", r"XLog|crc32|WAL|Wal|wal"),
    ("COPY input: read and receive each field", r"CopyRead|NextCopyFrom|CopyFrom|ReceiveFunctionCall|_recv$|recv$|pq_getmsg|array_recv|CopyGet"),
    ("buffers and locks", r"^hash_search|^hash_bytes|Buffer|LWLock|Lock|^Pin|^Unpin|StrategyGetBuffer|spin|s_lock"),
    ("memory: palloc, memcpy, memset", r"palloc|pfree|AllocSet|MemoryContext|mem(cpy|set|move|cmp)|repalloc|_int_free|_int_malloc|malloc|free"),
]


def samples(path):
    """{function: samples} of the postgres processes in one perf file."""
    out = subprocess.run(
        ["perf", "report", "--input", path, "--comm", "postgres", "--sort", "symbol", "--stdio",
         "--no-children", "--show-nr-samples", "--percentage", "relative", "-g", "none"],
        check=True, capture_output=True, text=True).stdout
    got = {}
    for line in out.splitlines():
        # "    10.73%          1234  [.] json_lex"
        m = re.match(r"\s*[\d.]+%\s+(\d+)\s+\[(.)\]\s+(\S+)", line)
        if not m:
            continue
        n, kind, sym = int(m.group(1)), m.group(2), m.group(3)
        key = "[k] " + sym if kind == "k" else sym
        got[key] = got.get(key, 0) + n
    return got


def stage_of(sym):
    for name, pat in STAGES:
        if re.search(pat, sym):
            return name
    return "other"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    files = sorted(glob.glob(os.path.join(d, "pg*.perf")))
    if not files:
        sys.exit(f"no pg*.perf in {d}: run dlq-bench ingest with -pgprofile")
    with open(os.path.join(d, "result.jsonl")) as f:
        pg_us = [json.loads(l)["us_per_msg_pg"] for l in f if l.strip()]
    us = statistics.median(pg_us)
    by_sym = defaultdict(int)
    for p in files:
        for sym, n in samples(p).items():
            by_sym[sym] += n
    total = sum(by_sym.values())
    if total == 0:
        sys.exit("perf holds no samples of postgres processes")
    by_stage, top = defaultdict(int), defaultdict(list)
    for sym, n in by_sym.items():
        st = stage_of(sym)
        by_stage[st] += n
        top[st].append((n, sym))
    print(f"PostgreSQL's side: {total} samples of postgres processes over {len(files)} drains; "
          f"median {us:.1f} µs/msg of PostgreSQL CPU (the runs: {', '.join(f'{x:.1f}' for x in pg_us)})")
    print()
    print("| stage | share | µs/msg | largest functions |")
    print("|---|---|---|---|")
    for st, n in sorted(by_stage.items(), key=lambda kv: -kv[1]):
        lead = ", ".join(f"{s} {100 * k / total:.1f}%" for k, s in sorted(top[st], reverse=True)[:3])
        print(f"| {st} | {100 * n / total:.0f}% | {us * n / total:.1f} | {lead} |")
    print(f"| **total** | 100% | **{us:.1f}** | |")


if __name__ == "__main__":
    main()
