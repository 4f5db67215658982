#!/usr/bin/env python3
"""Tables of one benchmark session (scripts/bench-session.sh): ingest pairs
against the raw COPY and naive pipelines, replay pairs against the raw replay,
and the search indexes' ingest cost; or of ingest rounds
(scripts/bench-ingest-rounds.sh) or replay rounds
(scripts/bench-replay-rounds.sh). Usage: bench-summary.py <session dir>."""
import json, os, sys, statistics, re
d = sys.argv[1]

def replay_rounds(d, st):
    """scripts/bench-replay-rounds.sh: rounds/<round>-<queue type>-<run>.jsonl;
    a table per queue type, a row per round, each dlq run against the raw
    replay of its own round and queue type; a run that failed shows as —."""
    def one(path):
        try:
            rows = [json.loads(l) for l in open(path) if l.strip()]
            return rows[-1] if rows else None
        except FileNotFoundError:
            return None
    names = sorted(os.listdir(f"{d}/rounds"))
    qtypes = []
    for n in names:
        m = re.match(r"(\d+)-(\w+)-raw\.jsonl$", n)
        if m and m.group(2) not in qtypes: qtypes.append(m.group(2))
    rounds = sorted({int(re.match(r"(\d+)-", n).group(1)) for n in names if re.match(r"\d+-", n)})
    modes = [m for m in ("seeded", "e2e", "base") if any(n.endswith(f"-{m}.jsonl") for n in names)]
    label = {"seeded": "dlq, stored rows", "e2e": "dlq serve, control queue", "base": "baseline build, stored rows"}
    for qt in sorted(qtypes, key=lambda q: (q != "quorum", q)):
        first = next((one(f"{d}/rounds/{i}-{qt}-raw.jsonl") for i in rounds if one(f"{d}/rounds/{i}-{qt}-raw.jsonl")), None)
        print(f"Replay into a {qt} queue, n = {format(first['n'], ',') if first else '?'} messages of 1 KiB per run:")
        print()
        print("| round (start, load) | raw replay (bench-limits) | " + " | ".join(f"{label[m]} | / raw" for m in modes) + " |")
        print("|---|---|" + "---|---|" * len(modes))
        raws, vals, ratios = [], {m: [] for m in modes}, {m: [] for m in modes}
        cpu = []
        for i in rounds:
            r = one(f"{d}/rounds/{i}-{qt}-raw.jsonl")
            t, l = st.get(f"replay round {i} {qt}: raw", ("?", "?"))
            cells = []
            if r: raws.append(r["msgs_per_s"])
            for m in modes:
                x = one(f"{d}/rounds/{i}-{qt}-{m}.jsonl")
                if x is None:
                    cells.append("— | —"); continue
                vals[m].append(x["msgs_per_s"])
                cpu.append((i, m, x))
                if r:
                    ratios[m].append(x["msgs_per_s"] / r["msgs_per_s"])
                    cells.append(f"{x['msgs_per_s']:,.0f} | {ratios[m][-1]:.2f}")
                else:
                    cells.append(f"{x['msgs_per_s']:,.0f} | —")
            rs = f"{r['msgs_per_s']:,.0f}" if r else "—"
            print(f"| {i} ({t}, {l}) | {rs} | " + " | ".join(cells) + " |")
        med = lambda xs: statistics.median(xs) if xs else float("nan")
        print(f"| **median** | {med(raws):,.0f} | " + " | ".join(
            f"{med(vals[m]):,.0f} | **{med(ratios[m]):.2f}** ({min(ratios[m], default=float('nan')):.2f}–{max(ratios[m], default=float('nan')):.2f})" for m in modes) + " |")
        print()
        for i in rounds:
            r = one(f"{d}/rounds/{i}-{qt}-raw.jsonl")
            if r: print(f"  round {i} raw {r['variant']}", {k: round(v) for k, v in r.items() if k.startswith("cpu")})
        for i, m, x in cpu:
            line = f"  round {i} {m}: {x['secs']:.2f}s cpu dlq/rabbit/pg {x['cpu_dlq_pct']:.0f}/{x['cpu_rabbit_pct']:.0f}/{x['cpu_pg_pct']:.0f}%"
            if x.get("ingest_msgs_per_s"):
                c = x.get("ingest_cpu_dlq_rabbit_pg_pct", [0, 0, 0])
                line += f"; ingest before it {x['ingest_msgs_per_s']:,.0f} msgs/s cpu {c[0]:.0f}/{c[1]:.0f}/{c[2]:.0f}%"
            print(line)
        print()
def us_per_msg(x):
    """CPU time per message in µs of a result line of either program
    (bench-limits: cpu_go_pct; dlq-bench: cpu_dlq_pct): program, pg,
    rabbit, total. The same formula as dlq-bench's (internal/bench
    usPerMsg): percent of one core × seconds / messages."""
    f = lambda pct: pct / 100 * x["secs"] / x["n"] * 1e6 if x.get("n") else 0.0
    prog = f(x.get("cpu_go_pct", 0) + x.get("cpu_dlq_pct", 0))
    pg, rabbit = f(x["cpu_pg_pct"]), f(x["cpu_rabbit_pct"])
    return prog, pg, rabbit, prog + pg + rabbit

def ingest_rounds(d, st):
    """scripts/bench-ingest-rounds.sh: ingest-rounds/<round>-raw.jsonl
    (bench-limits' pipeline; its COPY run is the raw limit) and
    <round>-<setting>-<head|base>.jsonl (dlq-bench ingest). A table of
    medians over the rounds (msgs/s, ratio to the same round's raw run,
    CPU µs per message), then the rounds one by one."""
    rd = f"{d}/ingest-rounds"
    def one(name):
        try:
            rows = [json.loads(l) for l in open(f"{rd}/{name}") if l.strip()]
        except FileNotFoundError:
            return None
        return rows[-1] if rows else None
    def raw(i):
        try:
            rows = [json.loads(l) for l in open(f"{rd}/{i}-raw.jsonl") if l.strip()]
        except FileNotFoundError:
            return None
        c = [r for r in rows if r["test"] == "d.pipeline" and r["variant"].startswith("copy")]
        return c[-1] if c else None
    names = os.listdir(rd)
    rounds = sorted({int(m.group(1)) for m in (re.match(r"(\d+)-", n) for n in names) if m})
    runs = sorted({(m.group(1), m.group(2)) for m in (re.match(r"\d+-([\w.]+)-(head|base)\.jsonl$", n) for n in names) if m},
                  key=lambda k: (k[0] != "text", k[0], k[1] != "head"))
    label = {"text": "text search on", "notext": "text search off", "encrypted": "encryption on",
             "limits": "text search on, the raw pipeline's dead letters"}
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    rng = lambda xs: f"{min(xs):.2f}–{max(xs):.2f}" if xs else "—"
    first = next((raw(i) for i in rounds if raw(i)), None)
    print(f"Ingest, n = {format(first['n'], ',') if first else '?'} dead letters of 1 KiB, quorum queue, {len(rounds)} rounds; medians over the rounds")
    print("(µs/msg: CPU time per message of the program, PostgreSQL's processes, RabbitMQ's, and their sum):")
    print()
    # Process mode: dlq serve's clock includes its start-up, the raw
    # program's begins at its subscription; "from subscribed" is the
    # like-for-like ratio (dlq-bench's msgs_per_s_subscribed).
    print("| run | rounds | msgs/s | / raw (min–max) | / raw from subscribed (min–max) | start-up ms | µs/msg program | pg | rabbit | total |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    raws = [raw(i) for i in rounds if raw(i)]
    def row(name, xs, ratios, sub_ratios):
        us = [us_per_msg(x) for x in xs]
        cols = [med([u[k] for u in us]) for k in range(4)]
        rs = f"**{med(ratios):.2f}** ({rng(ratios)})" if ratios else "1"
        ss = f"**{med(sub_ratios):.2f}** ({rng(sub_ratios)})" if sub_ratios else ("1" if not ratios else "—")
        ups = [x["startup_secs"] * 1000 for x in xs if x.get("startup_secs")]
        up = f"{med(ups):.0f} ({min(ups):.0f}–{max(ups):.0f})" if ups else "—"
        print(f"| {name} | {len(xs)} | {med([x['msgs_per_s'] for x in xs]):,.0f} | {rs} | {ss} | {up} | " + " | ".join(f"{c:.1f}" for c in cols) + " |")
    if raws: row("raw COPY pipeline (bench-limits)", raws, [], [])
    for s, b in runs:
        xs, ratios, sub_ratios = [], [], []
        for i in rounds:
            x, r = one(f"{i}-{s}-{b}.jsonl"), raw(i)
            if x is None: continue
            xs.append(x)
            if r: ratios.append(x["msgs_per_s"] / r["msgs_per_s"])
            if r and x.get("msgs_per_s_subscribed"): sub_ratios.append(x["msgs_per_s_subscribed"] / r["msgs_per_s"])
        if xs: row(f"dlq {'HEAD' if b == 'head' else 'baseline'}, {label.get(s, s)}", xs, ratios, sub_ratios)
    print()
    print("| round (start, load) | raw msgs/s | raw µs/msg | " + " | ".join(f"{label.get(s, s)} {b}: msgs/s, / raw, µs/msg" for s, b in runs) + " |")
    print("|---|---|---|" + "---|" * len(runs))
    for i in rounds:
        r = raw(i)
        t, l = st.get(f"ingest round {i}: raw", ("?", "?"))
        cells = []
        for s, b in runs:
            x = one(f"{i}-{s}-{b}.jsonl")
            if x is None: cells.append("—"); continue
            ratio = f"{x['msgs_per_s'] / r['msgs_per_s']:.2f}" if r else "—"
            if r and x.get("msgs_per_s_subscribed"):
                ratio += f" ({x['msgs_per_s_subscribed'] / r['msgs_per_s']:.2f} from subscribed)"
            cells.append(f"{x['msgs_per_s']:,.0f}, {ratio}, {us_per_msg(x)[3]:.1f}")
        rs = f"{r['msgs_per_s']:,.0f} | {us_per_msg(r)[3]:.1f}" if r else "— | —"
        print(f"| {i} ({t}, {l}) | {rs} | " + " | ".join(cells) + " |")
    print()

def jl(name):
    try: return [json.loads(l) for l in open(f"{d}/{name}") if l.strip()]
    except FileNotFoundError: return []
lim = jl("limits.jsonl"); ing = jl("ingest.jsonl"); rep = jl("replay.jsonl"); base = jl("replay-base.jsonl"); sc = jl("searchcost.jsonl")
stamps = re.findall(r"=== (\S+) load (\S+) \S+ \S+ (.*)", open(f"{d}/log.txt").read())
st = {s[2]: (s[0][:5], s[1]) for s in stamps}
if os.path.isdir(f"{d}/ingest-rounds"):
    ingest_rounds(d, st)
    sys.exit(0)
copy = [r for r in lim if r["test"]=="d.pipeline" and r["variant"].startswith("copy")]
batch = [r for r in lim if r["test"]=="d.pipeline" and r["variant"].startswith("batch")]
naive = [r for r in lim if r["test"].startswith("e.naive")]
ing1 = [r for r in ing if r["size"]==1024 and r["n"]==200000 and r["mode"]=="inproc"]
if ing1:
    print("| pair (start, load) | raw COPY pipeline | raw Batch pipeline | naive INSERT + ack, prefetch 1000 (n = 20,000) | dlq | dlq / COPY | dlq / naive |")
    print("|---|---|---|---|---|---|---|")
rc, rn = [], []
for i,(c,b,n,x) in enumerate(zip(copy,batch,naive,ing1),1):
    t,l = st.get(f"ingest pair {i}: raw",("?","?"))
    rc.append(x["msgs_per_s"]/c["msgs_per_s"]); rn.append(x["msgs_per_s"]/n["msgs_per_s"])
    print(f"| {i} ({t}, {l}) | {c['msgs_per_s']:,.0f} | {b['msgs_per_s']:,.0f} | {n['msgs_per_s']:,.0f} | {x['msgs_per_s']:,.0f} | {rc[-1]:.2f} | {rn[-1]:.1f}× |")
if rc: print(f"| **median of the pairs' ratios** | | | | | **{statistics.median(rc):.2f}** | **{statistics.median(rn):.1f}×** |")
ingb = jl("ingest-base.jsonl")
if ingb:
    rb = [b["msgs_per_s"]/c["msgs_per_s"] for c,b in zip(copy,ingb)]
    print()
    print("baseline build (ingest-base.jsonl) / COPY per pair:", [f"{r:.2f}" for r in rb], "median", f"{statistics.median(rb):.2f}",
          "| this build / baseline per pair:", [f"{x['msgs_per_s']/b['msgs_per_s']:.2f}" for x,b in zip(ing1,ingb)])
print()
for x in ing1:
    print(f"  dlq cpu dlq/rabbit/pg {x['cpu_dlq_pct']:.0f}/{x['cpu_rabbit_pct']:.0f}/{x['cpu_pg_pct']:.0f}% batch {x.get('batch_msgs',0):.0f} msgs {x.get('batch_ms',0):.1f} ms")
for c in copy: print(f"  copy cpu go/rabbit/pg {c['cpu_go_pct']:.0f}/{c['cpu_rabbit_pct']:.0f}/{c['cpu_pg_pct']:.0f}%")
for x in ing:
    if x not in ing1:
        print(f"other ingest: size {x['size']} n {x['n']} mode {x['mode']}: {x['msgs_per_s']:,.0f} msgs/s {x['mb_per_s']:.1f} MB/s cpu {x['cpu_dlq_pct']:.0f}/{x['cpu_rabbit_pct']:.0f}/{x['cpu_pg_pct']:.0f}% rss {x.get('peak_rss_mb')} batch {x.get('batch_msgs',0):.0f}/{x.get('batch_ms',0):.0f}ms")
raw = [r for r in lim if r["test"].startswith("f.")]
print()
if os.path.isdir(f"{d}/rounds"):
    replay_rounds(d, st)
    raw = []
elif base:
    print("| round (start, load) | raw replay (bench-limits) | dlq replay | dlq / raw | baseline build (replay-base.jsonl) | / raw |")
    print("|---|---|---|---|---|---|")
else:
    print("| round (start, load) | raw replay (bench-limits) | dlq replay | dlq / raw |")
    print("|---|---|---|---|")
rr, rb = [], []
for i,(r,x) in enumerate(zip(raw,rep),1):
    t,l = st.get(f"replay round {i}: raw",("?","?"))
    b = base[i-1] if i-1 < len(base) else None
    rr.append(x["msgs_per_s"]/r["msgs_per_s"])
    bs = ""
    if b: rb.append(b["msgs_per_s"]/r["msgs_per_s"]); bs = f"{b['msgs_per_s']:,.0f} | {rb[-1]:.2f}"
    print(f"| {i} ({t}, {l}) | {r['msgs_per_s']:,.0f} | {x['msgs_per_s']:,.0f} | {rr[-1]:.2f} |" + (f" {bs} |" if bs else ""))
if rr: print(f"| **median** | {statistics.median([r['msgs_per_s'] for r in raw]):,.0f} | {statistics.median([x['msgs_per_s'] for x in rep]):,.0f} | **{statistics.median(rr):.2f}** |" + (f" | {statistics.median(rb):.2f} |" if rb else ""))
for r in raw: print("  raw", r["variant"], {k: round(v) for k,v in r.items() if k.startswith("cpu")})
if raw:
    for x in rep: print("  dlq", {k: (round(v) if isinstance(v,float) else v) for k,v in x.items() if k.startswith("cpu") or k in ("secs",)})
w = [x["msgs_per_s"] for x in sc if not x.get("without_indexes")]
wo = [x["msgs_per_s"] for x in sc if x.get("without_indexes")]
if w and wo:
    print()
    print("search cost with:", [round(x) for x in w], "without:", [round(x) for x in wo])
    pl = [1-a/b for a,b in zip(w,wo)]
    print("loss per pair", [f"{p:.1%}" for p in pl], "median of pairs", f"{statistics.median(pl):.1%}", "of medians", f"{1-statistics.median(w)/statistics.median(wo):.1%}")
    for x in sc: print("  ", x.get("without_indexes"), round(x["msgs_per_s"]), {k: round(v) for k,v in x.items() if k.startswith("cpu")})
