#!/usr/bin/env bash
# The hand-run GPU check (docs/getting-started.md: running on a GPU). Needs the seed and the sglang cache under .carry/
# (git-ignored):
#   mkdir -p .carry/seed && cp ../shared/seed/metadata_kernels.py .carry/seed/
#   KVFUZZ_CACHE=.carry/cache python -c "from kvfuzz.targets.wheels import sglang_kernel_file as f; f('0.5.14')"
# usage: bash scripts/gpu_check.sh [STEP...]   (default: all steps, in this order)
#   suite    tests + corpora, compiled on CUDA, not the slow tests      -> $OUT/pytest.txt
#   corpora  `pytest -n auto corpora/`, the regression suite as users run it -> $OUT/corpora.txt
#   slow     the slow tests (seed defects found and minimized on CUDA)  -> $OUT/pytest-slow.txt
#   builtin  a builtin fuzz run (must find nothing)                     -> $OUT/builtin.json
#   seed     a seed fuzz run (finds SGLang 0.5.14's defects)            -> $OUT/seed.json
#   faults   tests/test_faults.py on CUDA (wild stores, hangs, flaky)   -> $OUT/faults.txt
#   bench    `kvfuzz bench`: bare vs checked cases/s, compiles          -> $OUT/bench.json
#   cold     a builtin campaign on an empty Triton cache (.tritoncache) -> $OUT/cold.json
#   warm     the same campaign again on that cache: nothing to compile  -> $OUT/warm.json
#   kernels  builtin vs seed timings, all SGLang-sized rows             -> $OUT/kernels.txt
# Time limits (s): PYTEST_S SLOW_S CORPORA_S BUILTIN_S FUZZ_S BENCH_S CAMPAIGN_S KERNELS_S; JOBS: shards;
# BENCH_ONLY narrows the kernel timings.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KVFUZZ_CACHE=$PWD/.carry/cache KVFUZZ_SEED_PATH=$PWD/.carry/seed/metadata_kernels.py
python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 2
nvidia-smi -L
python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)"

# between steps: a step cut by its time limit can leave workers behind that slow the next one
tidy() { pkill -f "m kvfuzz.worker"; pkill -f "python3 -m pytest"; sleep 1; true; }
step() { echo "== $1 ($(date +%T))"; }

run_suite() {
    # -v: every result is a line as it happens, so a run cut short still says what failed
    timeout "${PYTEST_S:-400}" python3 -m pytest -n 8 tests corpora -v -W ignore -m "not slow" -p no:cacheprovider \
        --timeout 240 -rfE > "$OUT/pytest.txt" 2>&1
    grep -E "FAILED|ERROR|passed|failed" "$OUT/pytest.txt" | grep -v " PASSED" | tail -15
}
run_corpora() {
    timeout "${CORPORA_S:-240}" python3 -m pytest -n auto corpora/ -p no:cacheprovider -rfE \
        --junitxml="$OUT/corpora.xml" > "$OUT/corpora.txt" 2>&1
    tail -3 "$OUT/corpora.txt"
    python3 - "$OUT/corpora.xml" <<'EOF'
import sys, collections, xml.etree.ElementTree as ET
devs = collections.Counter(p.get("value") for p in ET.parse(sys.argv[1]).iter("property") if p.get("name") == "kvfuzz_device")
print("cases per device:", dict(devs))
EOF
}
run_slow() {
    timeout "${SLOW_S:-300}" python3 -m pytest -n 4 tests -v -W ignore -m slow -p no:cacheprovider --timeout 280 \
        > "$OUT/pytest-slow.txt" 2>&1
    grep -E "FAILED|ERROR|passed|failed" "$OUT/pytest-slow.txt" | grep -v " PASSED" | tail -8
}
run_builtin() {
    timeout $(( ${BUILTIN_S:-120} + 60 )) python3 -m kvfuzz.cli fuzz --target builtin --device cuda \
        --budget "${BUILTIN_S:-120}" --seed 11 --report "$OUT/builtin.json" 2>&1 | grep -v "cases/s" | tail -6
}
run_seed() {
    # minimizing comes on top of --budget; past the limit, SIGTERM: kvfuzz saves what it has
    rm -rf /tmp/kvfuzz-seed-corpus
    timeout -s TERM $(( ${FUZZ_S:-45} + 180 )) python3 -m kvfuzz.cli fuzz --target "$KVFUZZ_SEED_PATH" --device cuda \
        --budget "${FUZZ_S:-45}" --seed 2 --report "$OUT/seed.json" --minimize-budget 10 \
        --corpus /tmp/kvfuzz-seed-corpus 2>&1 | grep -v "cases/s" | tail -14
    echo "exit ${PIPESTATUS[0]}"
    # each finding was saved when first seen, then its minimized form over it: one case each
    python3 -c "import sys; from kvfuzz.corpus import iter_cases; r = [s for _, s in iter_cases(sys.argv[1])]; \
print(len(r), 'corpus cases,', sum(getattr(s, 'minimized', False) for s in r), 'minimized')" /tmp/kvfuzz-seed-corpus
}
run_faults() {
    KVFUZZ_DEVICE=cuda timeout 300 python3 -m pytest -n 2 tests/test_faults.py -v -W ignore -p no:cacheprovider \
        > "$OUT/faults.txt" 2>&1
    grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed" "$OUT/faults.txt" | tail -12
}
run_bench() {
    timeout $(( ${BENCH_S:-150} * 2 + 60 )) python3 -m kvfuzz.cli bench --target builtin --device cuda \
        --budget "${BENCH_S:-150}" --report "$OUT/bench.json" 2>&1 | tail -12
}
campaign() {  # $1: cold|warm; the Triton cache lives in the checkout, so a warm machine keeps it
    export TRITON_CACHE_DIR=$PWD/.tritoncache
    [ "$1" = cold ] && rm -rf "$TRITON_CACHE_DIR"
    before=$(find "$TRITON_CACHE_DIR" -name "*.cubin" 2>/dev/null | wc -l)
    timeout -s TERM $(( ${CAMPAIGN_S:-300} + 120 )) python3 -m kvfuzz.cli fuzz --target builtin --device cuda \
        --budget "${CAMPAIGN_S:-300}" --seed 11 --jobs "${JOBS:-1}" --report "$OUT/$1.json" 2>&1 \
        | grep -v "cases/s" | tail -6
    after=$(find "$TRITON_CACHE_DIR" -name "*.cubin" 2>/dev/null | wc -l)
    echo "kernels compiled into the Triton cache by this campaign: $((after - before))"
    python3 scripts/summarize_report.py "$OUT/$1.json"
    unset TRITON_CACHE_DIR
}
run_cold() { campaign cold; }
run_warm() { campaign warm; }
run_kernels() {
    timeout "${KERNELS_S:-240}" python3 scripts/bench_kernels.py --seed-path "$KVFUZZ_SEED_PATH" \
        --only "${BENCH_ONLY:-}" > "$OUT/kernels.txt" 2>&1
    cat "$OUT/kernels.txt"
}

steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(suite corpora slow builtin seed faults bench cold warm kernels)
for s in "${steps[@]}"; do
    case "$s" in
        suite|corpora|slow|builtin|seed|faults|bench|cold|warm|kernels) step "$s"; "run_$s"; tidy ;;
        *) echo "gpu_check.sh: unknown step $s" >&2; exit 2 ;;
    esac
done
