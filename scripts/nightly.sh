#!/usr/bin/env bash
# The nightly job (docs/nightly.md): every op against each configured target, findings confirmed,
# minimized and saved, new ones merged into the regression corpus, reports written.
#   usage: scripts/nightly.sh [OUTDIR]            (default nightly/<date>)
#   CORPUS   the corpus new cases are merged into (default: corpora/ of the checkout this script
#            lives in, found from the script's own path, whatever the working directory)
#   TARGETS  targets, space-separated (default "builtin sglang==0.5.14"; a seed file path works too)
#   BUDGET   seconds of fuzzing per target (default 600); JOBS shards per target (default 1)
#   TIME_LIMIT wall clock per target, confirming and minimizing included (default 1.5 x BUDGET):
#            every op gets its slot however many defects it finds (`kvfuzz fuzz --time-limit`)
#   DEVICE   auto|cpu|cuda (default auto); STATE where campaigns keep their state (default nightly-state)
#   FUZZ_ARGS more `kvfuzz fuzz` options for every target (e.g. "--cross-check cpu --cross-check-every 20")
# Each target's campaign lives in $STATE/<target> (--campaign): the next night continues its case
# streams, and findings it already holds come back as known. Exit 1 if any target had a new
# finding, 2 if a run could not be judged (bad usage, a broken environment), else 0.
set -u
checkout=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
corpus=${CORPUS:-$checkout/corpora}
out=${1:-nightly/$(date +%F)}
state=${STATE:-nightly-state}
mkdir -p "$out" "$state"
status=0
for target in ${TARGETS:-builtin sglang==0.5.14}; do
    name=$(printf '%s' "$target" | tr -c 'A-Za-z0-9._-' '_')
    echo "== $target ($(date +%T))"
    budget=${BUDGET:-600}
    kvfuzz fuzz --target "$target" --device "${DEVICE:-auto}" --budget "$budget" --jobs "${JOBS:-1}" \
        --time-limit "${TIME_LIMIT:-$(( ${budget%.*} * 3 / 2 ))}" \
        --campaign "$state/$name" --report "$out/$name.json" --junit "$out/$name.xml" --markdown "$out/$name.md" \
        ${FUZZ_ARGS:-}
    rc=$?
    if [ "$rc" -eq 1 ]; then status=1; elif [ "$rc" -ge 2 ] && [ "$status" -ne 1 ]; then status=$rc; fi
    # every saved case joins the regression suite (a builtin finding is a must-pass case: the
    # suite fails until kvfuzz's kernel is fixed; an external target's is a strict xfail)
    if [ -d "$state/$name/corpus" ]; then
        kvfuzz corpus merge "$state/$name/corpus" "$corpus" || status=2
    fi
done
echo "nightly: reports in $out, new cases merged into $corpus, exit $status"
exit "$status"
