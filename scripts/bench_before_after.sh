#!/usr/bin/env bash
# `kvfuzz bench` on two trees of kvfuzz in one machine's lease, one after the other, each
# installed in turn (editable), so that the two figures share a host and its noise
# (docs/performance.md: "Before and after on one machine").
# usage: bash scripts/bench_before_after.sh BEFORE_DIR OUTDIR [--op NAME ...]
#   BEFORE_DIR: a tree holding pyproject.toml and kvfuzz/ (`git archive REV kvfuzz pyproject.toml
#   README.md | tar -x -C DIR`); the checkout is the "after" tree and is installed again at the end.
#   DEVICE (cuda), JOBS (12), BUDGET (24), SIZES (small), BENCH_S (time limit a tree, 190 s)
set -u
BEFORE=${1:?usage: bench_before_after.sh BEFORE_DIR OUTDIR [--op NAME ...]}; OUTDIR=${2:?OUTDIR}; shift 2
[ -f "$BEFORE/pyproject.toml" ] && [ -d "$BEFORE/kvfuzz" ] || { echo "$BEFORE: no pyproject.toml and kvfuzz/ there" >&2; exit 2; }
mkdir -p "$OUTDIR"
bench() {  # TREE LABEL [--op NAME ...]
    local tree=$1 label=$2; shift 2
    python3 -m pip install -q --no-deps --no-build-isolation -e "$tree" >> "$OUTDIR/pip.txt" 2>&1 || { echo "$tree: install failed" >&2; return 2; }
    timeout "${BENCH_S:-190}" python3 -m kvfuzz.cli bench --target builtin --device "${DEVICE:-cuda}" --jobs "${JOBS:-12}" \
        --budget "${BUDGET:-24}" --sizes "${SIZES:-small}" "$@" --report "$OUTDIR/bench-$label.json" > "$OUTDIR/bench-$label.txt" 2>&1
    echo "$label: exit $?"; grep -E "^[a-z_0-9]+ +[0-9]|VOID" "$OUTDIR/bench-$label.txt"
    pkill -f "m kvfuzz.worker"; sleep 1  # a tree cut by its time limit leaves no worker to the next
}
OPS=("$@")
bench "$BEFORE" before "${OPS[@]}"
bench . after "${OPS[@]}"
python3 -m pip install -q --no-deps --no-build-isolation -e . >> "$OUTDIR/pip.txt" 2>&1
