#!/usr/bin/env bash
# Shards and resume, shown on one machine (docs/nightly.md, "Shards and resume, measured"):
#   1. the campaign unsharded, BUDGET seconds per process;
#   2. --shard 1/2 and --shard 2/2 at once, into one corpus, the same BUDGET each;
#   3. a --campaign run stopped with SIGTERM after KILL_AFTER seconds, then started again.
# It prints, per run, the ops covered, the cases, the findings by signature, and whether any
# signature was saved twice in a corpus.
# usage: TARGET=path/to/metadata_kernels.py DEVICE=cpu BUDGET=120 bash scripts/shard_check.sh [OUTDIR]
#   STEPS="shards resume" (default both; the summary reads what OUTDIR holds)
set -u
OUTDIR=${1:-shard-check}; mkdir -p "$OUTDIR"; STEPS=${STEPS:-shards resume}
TARGET=${TARGET:-${KVFUZZ_SEED_PATH:-builtin}}; DEVICE=${DEVICE:-cpu}; BUDGET=${BUDGET:-120}
SEED=${SEED:-5}; KILL_AFTER=${KILL_AFTER:-$(( BUDGET / 2 ))}
FUZZ=(python3 -m kvfuzz.cli fuzz --target "$TARGET" --device "$DEVICE" --seed "$SEED" --minimize-budget 5)
fuzz() { "${FUZZ[@]}" "$@"; }

if [[ " $STEPS " == *" shards "* ]]; then
rm -rf "$OUTDIR"/whole* "$OUTDIR"/shard* "$OUTDIR/sharded"
fuzz --budget "$BUDGET" --corpus "$OUTDIR/whole" --report "$OUTDIR/whole.json" > "$OUTDIR/whole.log" 2>&1
fuzz --budget "$BUDGET" --shard 1/2 --corpus "$OUTDIR/sharded" --report "$OUTDIR/shard-1.json" > "$OUTDIR/shard-1.log" 2>&1 &
fuzz --budget "$BUDGET" --shard 2/2 --corpus "$OUTDIR/sharded" --report "$OUTDIR/shard-2.json" > "$OUTDIR/shard-2.log" 2>&1 &
wait
fi
if [[ " $STEPS " == *" resume "* ]]; then
rm -rf "$OUTDIR"/resume* "$OUTDIR/campaign"
# resume: stopped midway, then the same command again
# started directly (not through a function, which would run in a subshell): $! is kvfuzz itself
"${FUZZ[@]}" --budget "$BUDGET" --campaign "$OUTDIR/campaign" --report "$OUTDIR/resume-1.json" > "$OUTDIR/resume-1.log" 2>&1 &
pid=$!; sleep "$KILL_AFTER"; kill -TERM "$pid"; wait "$pid"; echo "first run stopped: exit $?" > "$OUTDIR/resume.txt"
fuzz --budget "$BUDGET" --campaign "$OUTDIR/campaign" --report "$OUTDIR/resume-2.json" > "$OUTDIR/resume-2.log" 2>&1
echo "second run: exit $?" >> "$OUTDIR/resume.txt"
fi

python3 - "$OUTDIR" <<'PY'
import collections, json, sys
from pathlib import Path
from kvfuzz.corpus import iter_cases
out = Path(sys.argv[1])
def report(name):
    return json.loads((out / f"{name}.json").read_text())
def sigs(r):
    return sorted({f["signature"] for f in r["findings"]})
def corpus(name):
    saved = [s for _, s in iter_cases(out / name) if not isinstance(s, Exception)]
    per = collections.Counter(s.finding.signature for s in saved if s.finding)
    return len(saved), sorted(k for k, v in per.items() if v > 1)
whole, s1, s2 = report("whole"), report("shard-1"), report("shard-2")
print(f"unsharded: {whole['cases']} cases, ops {sorted(o for o, s in whole['ops'].items() if s['cases'])}")
print(f"shards:    {s1['cases']} + {s2['cases']} cases, ops {sorted(o for r in (s1, s2) for o, s in r['ops'].items() if s['cases'])}")
a, b = set(sigs(whole)), set(sigs(s1)) | set(sigs(s2))
print(f"findings: unsharded {len(a)}, shards together {len(b)}; only unsharded: {sorted(a - b)}; only sharded: {sorted(b - a)}")
for name in ("whole", "sharded"):
    n, dup = corpus(name)
    print(f"corpus {name}: {n} cases, signatures saved twice: {dup or 'none'}")
r1, r2 = report("resume-1"), report("resume-2")
print((out / "resume.txt").read_text().strip())
print(f"resume: first run {r1['cases']} cases (interrupted={r1.get('interrupted')}), {len(r1['findings'])} findings; "
      f"second run {r2['cases']} cases, new {sum(f.get('new', True) for f in r2['findings'])}, "
      f"known {sum(not f.get('new', True) for f in r2['findings'])}")
for op in r2["ops"]:
    print(f"  {op}: first run stopped at case {r1['positions'].get(op)}; the second ran "
          f"{r2['ops'][op]['cases']} cases and stopped at case {r2['positions'].get(op)}")
PY
