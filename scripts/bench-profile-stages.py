#!/usr/bin/env python3
"""Where each microsecond of an ingest drain goes, per stage, from the
profiles of `dlq-bench ingest -cpuprofile cpu.pprof -memprofile allocs.pprof`
(scripts/bench-ingest-profile.sh runs it and keeps everything in one folder).

    bench-profile-stages.py <profile folder>

The folder holds the dlq-bench binary, cpu*.pprof and allocs*.pprof (one of
each per run, as dlq-bench names them: cpu.pprof, cpu-1024-2.pprof, ...),
allocs*.pprof.base, and result.jsonl (the runs' n, summed to divide by).
Each sample's stack (`go tool pprof -traces`) goes to the first stage of
STAGES, in order, that has a frame matching its pattern: the order makes
the more specific stage win (text search's column is computed inside the
COPY's row function, the search values inside convert). A stage is a set of
functions; when consumer/ or store/ingest*.go rename or add functions, add
them here, or they fall into "other" (the table shows its largest leaves).
Each allocation profile is read with -base <its .base>: the allocations of
the drain alone, not of the prefill before it.
"""
import glob, json, os, re, subprocess, sys
from collections import defaultdict

# (stage, pattern over a frame's function name), first match wins.
STAGES = [
    ("text indexer (beside ingest, not in the batch)",
     r"dlq/textindex\.|dlq/store\.\(\*Store\)\.IndexText"),
    ("text search at ingest: body_text column, text_index_queue entry",
     r"dlq/store\.\(\*Store\)\.bodyTextColumn|dlq/store\.BodyTextBytes|dlq/store\.textContent|dlq/store\.enqueueBatchText"),
    ("categories", r"dlq/consumer\.Categorize|dlq/category\."),
    ("search keys and hashes",
     r"dlq/consumer\.headerSearchValues|dlq/consumer\.appendSearchValues|dlq/store\.SearchKeys|dlq/store\.KeyHash|dlq/store\.failureKeys"),
    ("failure groups and activity counters",
     r"dlq/store\.groupArrival|dlq/store\.queueGroupChanges|dlq/store\.ingestActivity|dlq/store\.queueActivityDeltas"),
    ("sealing (encryption at rest)", r"dlq/store\.\(\*encryption\)|dlq/store\.\(\*Encryption\)|dlq/store\.nextMessageIDs|dlq/crypt\."),
    ("convert: headers and properties JSON, death record, failure, fingerprint",
     r"dlq/consumer\.convert|dlq/consumer\.Convert|dlq/broker\.AppendHeadersJSON|dlq/broker\.PropertiesOf|dlq/broker\.Extract"),
    ("COPY: encode rows and send", r"pgx/v5\.\(\*copyFrom\)|pgx/v5\.\(\*Conn\)\.CopyFrom|dlq/store\.\(\*Store\)\.IngestBatch\.func|pgconn\.\(\*PgConn\)\.CopyFrom"),
    ("commit and acks: begin, inflight and summary batch, COMMIT, ack, qos",
     r"dlq/store\.\(\*Store\)\.IngestBatch|dlq/consumer\.\(\*writer\)"),
    ("decode: header tables (amqp091-go readTable: x-death and the rest)", r"amqp091-go\.readTable"),
    ("decode: AMQP frames, properties, body, dispatch to the consumer",
     r"amqp091-go\.\(\*Connection\)\.(reader|demux|dispatch)|amqp091-go\.\(\*consumers\)|dlq/broker\.\(\*frameFilter\)"),
    ("intake loop: batching, select", r"dlq/consumer\.\(\*worker\)"),
    ("GC in the background, scheduler", r"^runtime\.(gcBgMarkWorker|bgsweep|bgscavenge|mcall|morestack|mstart|goexit0|schedule|findRunnable|sysmon)"),
    ("dlq-bench's polling and profiling (not dlq)", r"dlq/internal/bench\.|^main\.|runtime/pprof\."),
]

UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "hrs": 3600, "mins": 60,
         "B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "": 1}
VALUE = re.compile(r"^\s*(-?[\d.]+(?:e[-+]?\d+)?)([a-zA-Zµ]*)\s{2,}(\S.*?)\s*$")


def traces(binary, profile, extra):
    """The stacks of a profile (leaf first) with their values, in seconds
    or bytes or counts."""
    out = subprocess.run(["go", "tool", "pprof", "-traces", *extra, binary, profile],
                         check=True, capture_output=True, text=True).stdout
    stacks, cur, val = [], [], None
    for line in out.splitlines():
        if line.startswith("-----"):
            if val is not None:
                stacks.append((val, cur))
            cur, val = [], None
            continue
        if val is None:
            m = VALUE.match(line)
            if m and m.group(2) in UNITS:
                val = float(m.group(1)) * UNITS[m.group(2)]
                cur = [m.group(3).replace(" (inline)", "")]
        elif line.strip() and not line.strip().endswith(":") and ":" not in line.split()[0]:
            cur.append(line.strip().replace(" (inline)", ""))
    if val is not None:
        stacks.append((val, cur))
    return stacks


def stage_of(stack):
    for name, pat in STAGES:
        if any(re.search(pat, f) for f in stack):
            return name
    return "other"


def by_stage(stacks):
    tot, leaves = defaultdict(float), defaultdict(lambda: defaultdict(float))
    for v, st in stacks:
        s = stage_of(st)
        tot[s] += v
        if st:
            leaves[s][st[0]] += v
    return tot, leaves


def summed(binary, profiles, extra):
    """by_stage over several profiles: each with its own -base when extra
    asks for one (pprof subtracts only one base)."""
    tot, leaves = defaultdict(float), defaultdict(lambda: defaultdict(float))
    for p in profiles:
        args = [a.replace("{base}", p + ".base") for a in extra]
        t, l = by_stage(traces(binary, p, args))
        for k, v in t.items():
            tot[k] += v
        for k, d in l.items():
            for f, v in d.items():
                leaves[k][f] += v
    return tot, leaves


def main(argv):
    if len(argv) != 1:
        sys.exit(__doc__)
    d = argv[0]
    binary = os.path.join(d, "dlq-bench")
    cpus = sorted(glob.glob(os.path.join(d, "cpu*.pprof")))
    allocs = sorted(glob.glob(os.path.join(d, "allocs*.pprof")))
    if not cpus:
        sys.exit(f"no cpu*.pprof in {d}")
    runs = [json.loads(l) for l in open(os.path.join(d, "result.jsonl")) if l.strip()]
    n = sum(r["n"] for r in runs)
    print(f"{len(runs)} drain(s), {n:,} messages in all; CPU per message of the runs (getrusage and /proc, not the profile): "
          + ", ".join(f"dlq {r['us_per_msg_dlq']:.1f} pg {r['us_per_msg_pg']:.1f} rabbit {r['us_per_msg_rabbit']:.1f} µs" for r in runs))
    print()
    cpu_tot, cpu_leaves = summed(binary, cpus, [])
    space = objs = None
    if allocs:
        space, _ = summed(binary, allocs, ["-sample_index=alloc_space", "-base", "{base}"])
        objs, _ = summed(binary, allocs, ["-sample_index=alloc_objects", "-base", "{base}"])
    total = sum(cpu_tot.values())
    names = [s for s, _ in STAGES] + ["other"]
    print("| stage | CPU s | share | µs/msg |" + (" allocated MB | bytes/msg | objects/msg |" if space else ""))
    print("|---|---|---|---|" + ("---|---|---|" if space else ""))
    for s in sorted(names, key=lambda s: -cpu_tot.get(s, 0)) + ["total"]:
        c = total if s == "total" else cpu_tot.get(s, 0)
        if s != "total" and c == 0 and not (space and space.get(s)):
            continue
        line = f"| {'**total**' if s == 'total' else s} | {c:.2f} | {c / total:.0%} | {c / n * 1e6:.1f} |"
        if space:
            b = sum(space.values()) if s == "total" else space.get(s, 0)
            o = sum(objs.values()) if s == "total" else objs.get(s, 0)
            line += f" {b / 1e6:,.0f} | {b / n:,.0f} | {o / n:.0f} |"
        print(line)
    other = sorted(cpu_leaves.get("other", {}).items(), key=lambda kv: -kv[1])[:8]
    if other:
        print()
        print("largest leaves of other:", ", ".join(f"{f} {v:.2f}s" for f, v in other))


if __name__ == "__main__":
    main(sys.argv[1:])
