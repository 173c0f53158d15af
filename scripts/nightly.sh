#!/usr/bin/env bash
# The nightly job (docs/nightly.md): every op against each configured target, findings confirmed,
# minimized and saved, new ones merged into the regression corpus, reports written.
#   usage: scripts/nightly.sh [OUTDIR]            (default nightly/<date>)
#   CORPUS   the corpus new cases are merged into (default: corpora/ of the checkout this script
#            lives in, found from the script's own path, whatever the working directory)
#   TARGETS  targets, space-separated (default "builtin sglang==0.5.14"; a seed file path works too)
#   BUDGET   seconds of fuzzing per target (default 600); JOBS shards per target (default 1)
#   TIME_LIMIT wall clock per target, confirming and minimizing included (default 1.5 x BUDGET):
#            every op gets its share however many defects it finds (`kvfuzz fuzz --time-limit`)
#   DEVICE   auto|cpu|cuda (default auto); STATE where campaigns keep their state (default nightly-state)
#   FUZZ_ARGS more `kvfuzz fuzz` options for every target (e.g. "--cross-check cpu --cross-check-every 20")
# Each target's campaign lives in $STATE/<target> (--campaign): the next night continues its case
# streams, and findings it already holds come back as known. SIGTERM or SIGINT (a scheduler's
# end of the slot) stops the running target as its own time limit would: it writes its reports,
# cut short, its corpus is merged, the targets not reached are listed as not run, and
# OUTDIR/summary.txt is written. Exit status, the first that applies: 1 a new finding; 2 a run
# could not be judged (bad usage, a broken environment) or a merge failed; 4 an internal error
# of kvfuzz; 130 cut short; 3 an op ran no case; 0 clean.
set -u
checkout=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
corpus=${CORPUS:-$checkout/corpora}
out=${1:-nightly/$(date +%F)}
state=${STATE:-nightly-state}
mkdir -p "$out" "$state"
summary=$out/summary.txt
: > "$summary"
status=0
stopped=""
pid=""

# the worse of two exit statuses: 1 > 2 > 4 > 130 > 3 > 0
rank() { case $1 in 1) echo 5;; 2) echo 4;; 4) echo 3;; 130) echo 2;; 3) echo 1;; 0) echo 0;; *) echo 4;; esac; }
worse() { if [ "$(rank "$2")" -gt "$(rank "$1")" ]; then echo "$2"; else echo "$1"; fi; }

# a stop signal reaches kvfuzz once (a process-group signal has already reached it: kvfuzz
# notes a second one and goes on writing its reports); this script then waits for it
on_stop() {
    stopped=$1
    if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null; fi
}
trap 'on_stop SIGTERM' TERM
trap 'on_stop SIGINT' INT

# one line per target: its exit status and what its report says
summarize() {
    python3 - "$1" "$2" "$3" <<'PY' >> "$summary"
import json, sys
target, rc, path = sys.argv[1:]
try:
    r = json.load(open(path))
except (OSError, ValueError):
    print(f"{target}: exit {rc}, no report")
    sys.exit()
ops = r.get("ops", {})
not_run = [op for op, s in ops.items() if not s.get("skipped") and not s.get("cases")]
print(f"{target}: exit {rc}, {r.get('cases', 0)} cases, {len(r.get('findings', []))} findings "
      f"({sum(f.get('new', True) for f in r.get('findings', []))} new)"
      + (f", cut short by {r.get('cut_short_by') or 'an interrupt'}" if r.get("cut_short") else "")
      + (f", {r['error']}" if r.get("error") else "")
      + (f", ran no case: {', '.join(not_run)}" if not_run else ""))
PY
}

for target in ${TARGETS:-builtin sglang==0.5.14}; do
    name=$(printf '%s' "$target" | tr -c 'A-Za-z0-9._-' '_')
    if [ -n "$stopped" ]; then
        echo "$target: not run (the nightly was stopped by $stopped)" >> "$summary"
        status=$(worse "$status" 130)
        continue
    fi
    echo "== $target ($(date +%T))"
    budget=${BUDGET:-600}
    kvfuzz fuzz --target "$target" --device "${DEVICE:-auto}" --budget "$budget" --jobs "${JOBS:-1}" \
        --time-limit "${TIME_LIMIT:-$(( ${budget%.*} * 3 / 2 ))}" \
        --campaign "$state/$name" --report "$out/$name.json" --junit "$out/$name.xml" --markdown "$out/$name.md" \
        ${FUZZ_ARGS:-} &
    pid=$!
    # `wait` returns early when a trapped signal arrives: wait again until kvfuzz has exited
    while :; do
        wait "$pid"
        rc=$?
        kill -0 "$pid" 2>/dev/null || break
    done
    pid=""
    status=$(worse "$status" "$rc")
    summarize "$target" "$rc" "$out/$name.json"
    # every saved case joins the regression suite (a builtin finding is a must-pass case: the
    # suite fails until kvfuzz's kernel is fixed; an external target's is a strict xfail)
    if [ -d "$state/$name/corpus" ]; then
        kvfuzz corpus merge "$state/$name/corpus" "$corpus" || status=$(worse "$status" 2)
    fi
done
cat "$summary"
echo "nightly: reports in $out, summary in $summary, new cases merged into $corpus, exit $status"
exit "$status"
